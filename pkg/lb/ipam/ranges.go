package ipam

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
)

// maxTracked bounds the offsets of a range that auto-assignment hands out: a /64
// (or larger) IPv6 range is never exhausted in practice, and offsets beyond it stay
// valid for explicit requests (they are tracked in the allocator's IP map only).
const maxTracked = 1 << 62

// u128 is an address as a 128-bit number (IPv4 in its IPv4-mapped form, so two
// addresses of one family subtract correctly).
type u128 struct{ hi, lo uint64 }

func u128Of(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (u u128) add(x uint64) u128 {
	lo, c := bits.Add64(u.lo, x, 0)
	return u128{u.hi + c, lo}
}

func (u u128) sub(v u128) u128 {
	lo, b := bits.Sub64(u.lo, v.lo, 0)
	hi, _ := bits.Sub64(u.hi, v.hi, b)
	return u128{hi, lo}
}

func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte{byte(u.lo >> 24), byte(u.lo >> 16), byte(u.lo >> 8), byte(u.lo)})
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

// isBuggy reports an IPv4 address ending in .0 or .255 (avoidBuggyIPs).
func isBuggy(ip netip.Addr) bool {
	if !ip.Is4() {
		return false
	}
	b := ip.As4()
	return b[3] == 0 || b[3] == 255
}

// ipRange is one contiguous entry of a pool, with a "lowest free address" index
// that costs memory only for addresses that were handed out:
//
//   - every tracked offset below next is either in use or in the free heap;
//   - offsets at or above next are free unless the allocator's IP map says they are
//     in use (explicit requests may land there).
//
// So the lowest free offset is the smallest free heap entry, or else the first
// offset from next on that is not in use. A heap entry that an explicit request
// took stays in the heap ("stale", flagged on its ipUse so a later free does not
// push it twice) and is dropped when it reaches the top. Memory is O(addresses in
// use + free addresses below next), never O(range size).
type ipRange struct {
	pool        *pool
	family      int
	first, last netip.Addr
	base        u128
	is4         bool
	avoidBuggy  bool
	limit       uint64 // tracked offsets: [0, limit)
	next        uint64
	heap        []uint64
}

func newRange(p *pool, first, last netip.Addr, avoidBuggy bool) *ipRange {
	r := &ipRange{pool: p, first: first, last: last, base: u128Of(first), is4: first.Is4(), avoidBuggy: avoidBuggy && first.Is4()}
	if !r.is4 {
		r.family = 1
	}
	d := u128Of(last).sub(r.base)
	if d.hi != 0 || d.lo >= maxTracked {
		r.limit = maxTracked
	} else {
		r.limit = d.lo + 1
	}
	return r
}

// size is the number of assignable addresses, saturated at MaxUint64.
func (r *ipRange) size() uint64 {
	d := u128Of(r.last).sub(r.base)
	if d.hi != 0 || d.lo == math.MaxUint64 {
		return math.MaxUint64
	}
	n := d.lo + 1
	if r.avoidBuggy {
		a, b := int64(r.base.lo&0xFFFFFFFF), int64(u128Of(r.last).lo&0xFFFFFFFF)
		n -= uint64(countMod(a, b, 0) + countMod(a, b, 255))
	}
	return n
}

// countMod counts n in [a, b] with n%256 == rem.
func countMod(a, b, rem int64) int64 {
	upTo := func(x int64) int64 {
		if x < rem {
			return 0
		}
		return (x-rem)/256 + 1
	}
	return upTo(b) - upTo(a-1)
}

func (r *ipRange) contains(ip netip.Addr) bool {
	return ip.Is4() == r.is4 && r.first.Compare(ip) <= 0 && ip.Compare(r.last) <= 0
}

func (r *ipRange) addr(off uint64) netip.Addr { return r.base.add(off).addr(r.is4) }

// offset returns ip's offset and whether it is tracked by the free index.
func (r *ipRange) offset(ip netip.Addr) (uint64, bool) {
	d := u128Of(ip).sub(r.base)
	return d.lo, d.hi == 0 && d.lo < r.limit
}

// take records that ip (in r, free until now) is in use. It reports whether ip
// stays in the heap as a stale entry.
func (r *ipRange) take(ip netip.Addr) (stale bool) {
	off, ok := r.offset(ip)
	if !ok {
		return false
	}
	switch {
	case len(r.heap) > 0 && r.heap[0] == off:
		r.popHeap()
	case off == r.next:
		r.next++
	case off < r.next:
		return true // free below next: in the heap, now stale
	}
	// Otherwise ip is above next and found in use when next gets there.
	return false
}

// free records that ip (in r) is no longer in use; stale is what take returned
// (or false once the stale entry was dropped).
func (r *ipRange) free(ip netip.Addr, stale bool) {
	off, ok := r.offset(ip)
	if !ok || off >= r.next || stale {
		return
	}
	r.heap = append(r.heap, off)
	h := r.heap
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent] <= h[i] {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func (r *ipRange) popHeap() uint64 {
	h := r.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if rr := l + 1; rr < n && h[rr] < h[l] {
			m = rr
		}
		if h[i] <= h[m] {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	r.heap = h
	return top
}
