package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Path attribute types and flags the relay reads or writes.
const (
	attrMPReach      = 14
	attrMPUnreach    = 15
	flagOptional     = 0x80
	flagExtendedLen  = 0x10
	maxWithdrawBatch = 1 << 20 // bytes of NLRI per UPDATE when extended messages allow more
)

// EndOfRIB reports whether an UPDATE body is an End-of-RIB marker (RFC 4724
// section 2) and for which family: an empty UPDATE for IPv4 unicast, else an
// UPDATE whose only attribute is an MP_UNREACH_NLRI without NLRI.
func EndOfRIB(body []byte) (Family, bool) {
	if len(body) == 4 && binary.BigEndian.Uint32(body) == 0 {
		return IPv4Unicast, true
	}
	if len(body) < 4 || body[0] != 0 || body[1] != 0 {
		return Family{}, false
	}
	attrs := body[4:]
	if int(binary.BigEndian.Uint16(body[2:])) != len(attrs) || len(attrs) < 3 {
		return Family{}, false
	}
	flags, typ := attrs[0], attrs[1]
	var l int
	var v []byte
	if flags&flagExtendedLen != 0 {
		if len(attrs) < 4 {
			return Family{}, false
		}
		l, v = int(binary.BigEndian.Uint16(attrs[2:])), attrs[4:]
	} else {
		l, v = int(attrs[2]), attrs[3:]
	}
	if typ != attrMPUnreach || l != 3 || len(v) != 3 {
		return Family{}, false
	}
	return Family{AFI: binary.BigEndian.Uint16(v), SAFI: v[2]}, true
}

// endOfRIBBytes is the canonical End-of-RIB of a family.
func endOfRIBBytes(f Family) []byte {
	if f == IPv4Unicast {
		return frame(TypeUpdate, []byte{0, 0, 0, 0})
	}
	return frame(TypeUpdate, []byte{0, 0, 0, 6, flagOptional, attrMPUnreach, 3, byte(f.AFI >> 8), byte(f.AFI), f.SAFI})
}

// pathKey is one path as the router knows it.
type pathKey struct {
	fam    Family
	id     uint32 // ADD-PATH path identifier (0 without ADD-PATH)
	prefix netip.Prefix
}

// ribOut is what a router has been sent: the unicast paths it holds from this
// session. Not safe for concurrent use.
type ribOut struct {
	paths map[pathKey]struct{}
	count map[Family]int
}

func newRIBOut() *ribOut {
	return &ribOut{paths: map[pathKey]struct{}{}, count: map[Family]int{}}
}

func (r *ribOut) add(k pathKey) {
	if _, ok := r.paths[k]; !ok {
		r.paths[k] = struct{}{}
		r.count[k.fam]++
	}
}

func (r *ribOut) remove(k pathKey) {
	if _, ok := r.paths[k]; ok {
		delete(r.paths, k)
		r.count[k.fam]--
	}
}

var errTruncated = errors.New("truncated")

// applyUpdate records an UPDATE sent to the router (IPv4 and IPv6 unicast; other
// families are not tracked). An error means the body did not parse: what it did
// parse is recorded.
func (r *ribOut) applyUpdate(body []byte, n Negotiated) error {
	if len(body) < 4 {
		return errTruncated
	}
	wl := int(binary.BigEndian.Uint16(body))
	if wl > len(body)-4 {
		return errTruncated
	}
	withdrawn, rest := body[2:2+wl], body[2+wl:]
	al := int(binary.BigEndian.Uint16(rest))
	if al > len(rest)-2 {
		return errTruncated
	}
	attrs, nlri := rest[2:2+al], rest[2+al:]
	v4ID := n.AddPathSend[IPv4Unicast]
	if err := eachPrefix(withdrawn, false, v4ID, func(id uint32, p netip.Prefix) { r.remove(pathKey{IPv4Unicast, id, p}) }); err != nil {
		return err
	}
	for len(attrs) > 0 {
		if len(attrs) < 3 {
			return errTruncated
		}
		flags, typ := attrs[0], attrs[1]
		hl, l := 3, int(attrs[2])
		if flags&flagExtendedLen != 0 {
			if len(attrs) < 4 {
				return errTruncated
			}
			hl, l = 4, int(binary.BigEndian.Uint16(attrs[2:]))
		}
		if l > len(attrs)-hl {
			return errTruncated
		}
		v := attrs[hl : hl+l]
		attrs = attrs[hl+l:]
		switch typ {
		case attrMPReach:
			if len(v) < 5 || len(v) < 5+int(v[3]) {
				return errTruncated
			}
			f := Family{AFI: binary.BigEndian.Uint16(v), SAFI: v[2]}
			if f != IPv6Unicast && f != IPv4Unicast {
				continue
			}
			if err := eachPrefix(v[5+int(v[3]):], f == IPv6Unicast, n.AddPathSend[f], func(id uint32, p netip.Prefix) { r.add(pathKey{f, id, p}) }); err != nil {
				return err
			}
		case attrMPUnreach:
			if len(v) < 3 {
				return errTruncated
			}
			f := Family{AFI: binary.BigEndian.Uint16(v), SAFI: v[2]}
			if f != IPv6Unicast && f != IPv4Unicast {
				continue
			}
			if err := eachPrefix(v[3:], f == IPv6Unicast, n.AddPathSend[f], func(id uint32, p netip.Prefix) { r.remove(pathKey{f, id, p}) }); err != nil {
				return err
			}
		}
	}
	return eachPrefix(nlri, false, v4ID, func(id uint32, p netip.Prefix) { r.add(pathKey{IPv4Unicast, id, p}) })
}

// eachPrefix decodes a list of (path identifier,) length, prefix (RFC 4271 4.3,
// RFC 7911 3).
func eachPrefix(b []byte, v6, addPath bool, fn func(id uint32, p netip.Prefix)) error {
	maxBits := 32
	if v6 {
		maxBits = 128
	}
	for len(b) > 0 {
		var id uint32
		if addPath {
			if len(b) < 4 {
				return errTruncated
			}
			id, b = binary.BigEndian.Uint32(b), b[4:]
		}
		if len(b) < 1 {
			return errTruncated
		}
		bits := int(b[0])
		nb := (bits + 7) / 8
		if bits > maxBits || len(b) < 1+nb {
			return fmt.Errorf("prefix length %d: %w", bits, errTruncated)
		}
		var a [16]byte
		copy(a[:], b[1:1+nb])
		b = b[1+nb:]
		addr := netip.AddrFrom16(a)
		if !v6 {
			addr = netip.AddrFrom4([4]byte(a[:4]))
		}
		fn(id, netip.PrefixFrom(addr, bits).Masked())
	}
	return nil
}

// appendPrefix encodes one (path identifier,) length, prefix.
func appendPrefix(b []byte, k pathKey, addPath bool) []byte {
	if addPath {
		b = binary.BigEndian.AppendUint32(b, k.id)
	}
	bits := k.prefix.Bits()
	b = append(b, byte(bits))
	a := k.prefix.Addr().AsSlice()
	return append(b, a[:(bits+7)/8]...)
}

// withdrawals are the UPDATEs that withdraw every path the router holds, each
// within the session's maximum message length, IPv4 before IPv6, paths sorted.
func (r *ribOut) withdrawals(n Negotiated) [][]byte {
	keys := make([]pathKey, 0, len(r.paths))
	for k := range r.paths {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b pathKey) int {
		if a.fam != b.fam {
			return int(a.fam.AFI) - int(b.fam.AFI)
		}
		if c := a.prefix.Addr().Compare(b.prefix.Addr()); c != 0 {
			return c
		}
		if a.prefix.Bits() != b.prefix.Bits() {
			return a.prefix.Bits() - b.prefix.Bits()
		}
		return int(a.id) - int(b.id)
	})
	var out [][]byte
	// room for NLRI: the message less header, the two length fields and, for
	// MP_UNREACH, its 4-byte attribute header and AFI/SAFI.
	room4 := min(n.MaxLen(), maxWithdrawBatch) - HeaderLen - 4
	room6 := room4 - 4 - 3
	var buf []byte
	var fam Family
	flush := func() {
		if len(buf) == 0 {
			return
		}
		var body []byte
		if fam == IPv4Unicast {
			body = binary.BigEndian.AppendUint16(nil, uint16(len(buf)))
			body = append(body, buf...)
			body = append(body, 0, 0)
		} else {
			attr := []byte{flagOptional | flagExtendedLen, attrMPUnreach}
			attr = binary.BigEndian.AppendUint16(attr, uint16(3+len(buf)))
			attr = append(attr, byte(fam.AFI>>8), byte(fam.AFI), fam.SAFI)
			attr = append(attr, buf...)
			body = []byte{0, 0}
			body = binary.BigEndian.AppendUint16(body, uint16(len(attr)))
			body = append(body, attr...)
		}
		out = append(out, frame(TypeUpdate, body))
		buf = nil
	}
	for _, k := range keys {
		if k.fam != fam {
			flush()
			fam = k.fam
		}
		room := room4
		if fam != IPv4Unicast {
			room = room6
		}
		enc := appendPrefix(nil, k, n.AddPathSend[k.fam])
		if len(buf)+len(enc) > room {
			flush()
		}
		buf = append(buf, enc...)
	}
	flush()
	return out
}
