package wire

import (
	"encoding/binary"
	"testing"
)

// TestReviewOpenReencodingStaysValid: a router's OPEN whose kept capabilities
// exceed 255 bytes even after unicastOnly (repeated unicast multiprotocol
// entries: each is appended to o.caps although Families is de-duplicated; or a
// graceful restart capability listing a unicast family many times) is
// re-encoded with its optional parameters length (and a parameter length)
// truncated to a byte: GoBGP is handed an OPEN that does not parse by the
// relay's own rules, where the relay promises only canonical messages. GoBGP's
// parser takes it without an error but reads only the first (length mod 256)
// bytes of capabilities: with an ADD-PATH capability after the repeated entries,
// GoBGP sees 9 capabilities and no ADD-PATH where the relay sees 41 and ADD-PATH
// receive, so the relay decodes GoBGP's UPDATEs with path identifiers they do not
// have (wrong prefixes_announced, wrong withdrawals). ParseOpen should refuse the
// OPEN (or Bytes de-duplicate, or use RFC 9072 lengths) instead.
func TestReviewOpenReencodingStaysValid(t *testing.T) {
	// 40 multiprotocol IPv4 unicast TLVs (6 bytes each) in one optional parameter.
	var mp []byte
	for range 40 {
		mp = append(mp, capMultiprotocol, 4, 0, 1, 0, 1)
	}
	head := openBody(65001, 90, "10.0.0.2")[:9]
	oneParam := append([]byte(nil), head...)
	oneParam = append(oneParam, byte(2+len(mp)), 2, byte(len(mp)))
	oneParam = append(oneParam, mp...)

	// One graceful restart capability listing IPv4 unicast 63 times (254 bytes),
	// in an RFC 9072 extended optional parameter.
	gr := []byte{capGracefulRestart, 254, 0x40, 120}
	for range 63 {
		gr = append(gr, 0, 1, 1, 0x80)
	}
	extParam := append([]byte(nil), head...)
	extParam = append(extParam, 255, 255)
	extParam = binary.BigEndian.AppendUint16(extParam, uint16(3+len(gr)))
	extParam = append(extParam, 2)
	extParam = binary.BigEndian.AppendUint16(extParam, uint16(len(gr)))
	extParam = append(extParam, gr...)

	for name, body := range map[string][]byte{
		"repeated multiprotocol IPv4 unicast":            oneParam,
		"graceful restart listing IPv4 unicast 63 times": extParam,
	} {
		o, err := ParseOpen(body)
		if err != nil {
			t.Logf("%s: refused (%v)", name, err)
			continue // refusing it is fine
		}
		out := o.Bytes()
		if _, err := ParseOpen(out[HeaderLen:]); err != nil {
			t.Errorf("%s: accepted, but the OPEN the relay gives GoBGP does not parse: %v", name, err)
		}
	}
}
