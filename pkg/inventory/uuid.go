package inventory

import (
	"encoding/hex"
	"slices"
	"strings"
)

// SameSystemUUID compares two system UUIDs. comparable is false when either is empty
// or not a UUID (absence is not a contradiction). Otherwise same is true when they are
// equal ignoring case, in any of the byte orders the same 16 bytes are written in:
// as is (RFC 4122), with the first three fields byte-swapped (SMBIOS stores them
// little-endian, and tools differ in whether they swap them), or with all 16 bytes
// reversed (the IPMI specification's GUID order, in which Get System GUID answers).
//
// A placeholder (all zeros, all ones, or the 03000200-0400-0500-0006-000700080009 that
// many boards' firmware reports unset) identifies no machine: not comparable either.
func SameSystemUUID(a, b string) (same, comparable bool) {
	x, okA := uuidBytes(a)
	y, okB := uuidBytes(b)
	if !okA || !okB || isPlaceholder(x) || isPlaceholder(y) {
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

// UUIDForms returns the canonical (lower-case) text of u in each byte order
// SameSystemUUID accepts, without duplicates; nil when u is not a UUID or is a
// placeholder. Indexing a host under every form finds it whatever order a Node or BMC
// reports.
func UUIDForms(u string) []string {
	b, ok := uuidBytes(u)
	if !ok || isPlaceholder(b) {
		return nil
	}
	var out []string
	for _, f := range [][16]byte{b, swapSMBIOS(b), reverse(b)} {
		if s := formatUUID(f); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// IsPlaceholderUUID reports whether u is a UUID that firmware reports when none is set.
func IsPlaceholderUUID(u string) bool {
	b, ok := uuidBytes(u)
	return ok && isPlaceholder(b)
}

var placeholders = func() map[[16]byte]bool {
	m := map[[16]byte]bool{}
	for _, s := range []string{
		"00000000-0000-0000-0000-000000000000",
		"ffffffff-ffff-ffff-ffff-ffffffffffff",
		"03000200-0400-0500-0006-000700080009", // "To Be Filled By O.E.M." boards
	} {
		b, _ := uuidBytes(s)
		for _, f := range [][16]byte{b, swapSMBIOS(b), reverse(b)} {
			m[f] = true
		}
	}
	return m
}()

func isPlaceholder(b [16]byte) bool { return placeholders[b] }

func formatUUID(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
