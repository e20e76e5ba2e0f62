package inventory

import (
	"encoding/hex"
	"strings"
)

// SameSystemUUID compares two system UUIDs. comparable is false when either is empty
// or not a UUID (absence is not a contradiction). Otherwise same is true when they are
// equal ignoring case, in any of the byte orders the same 16 bytes are written in:
// as is (RFC 4122), with the first three fields byte-swapped (SMBIOS stores them
// little-endian, and tools differ in whether they swap them), or with all 16 bytes
// reversed (the IPMI specification's GUID order, in which Get System GUID answers).
func SameSystemUUID(a, b string) (same, comparable bool) {
	x, okA := uuidBytes(a)
	y, okB := uuidBytes(b)
	if !okA || !okB {
		return false, false
	}
	if x == y {
		return true, true
	}
	return swapSMBIOS(x) == y || reverse(x) == y, true
}

// reverse reverses all 16 bytes.
func reverse(u [16]byte) [16]byte {
	for i, j := 0, 15; i < j; i, j = i+1, j-1 {
		u[i], u[j] = u[j], u[i]
	}
	return u
}

func uuidBytes(s string) ([16]byte, bool) {
	var out [16]byte
	s = strings.TrimSpace(s)
	if !uuidRE.MatchString(s) {
		return out, false
	}
	raw, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(raw) != 16 {
		return out, false
	}
	copy(out[:], raw)
	return out, true
}

// swapSMBIOS reverses the byte order of the first three fields (4, 2 and 2 bytes).
func swapSMBIOS(u [16]byte) [16]byte {
	u[0], u[1], u[2], u[3] = u[3], u[2], u[1], u[0]
	u[4], u[5] = u[5], u[4]
	u[6], u[7] = u[7], u[6]
	return u
}
