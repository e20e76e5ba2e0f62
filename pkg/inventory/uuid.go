package inventory

import (
	"encoding/hex"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// SameSystemUUID compares two system UUIDs. comparable is false when either is empty
// or not a UUID (absence is not a contradiction). Otherwise same is true when they are
// the same 16 bytes ignoring case, in any of the byte orders they are written in: as is
// (RFC 4122), with the first three fields byte-swapped (SMBIOS stores them
// little-endian, and tools differ in whether they swap them), with all 16 bytes
// reversed (the IPMI specification's GUID order, in which Get System GUID answers), and
// every combination of these (a BMC may reverse the SMBIOS form). The relation is an
// equivalence: two values that each match a third match each other, so a Node, its
// inventory host and its BMC that each write the machine's UUID in another order agree.
// A UUID may be written without hyphens or in braces.
//
// A placeholder (all zeros, all ones, or the 03000200-0400-0500-0006-000700080009 that
// many boards' firmware reports unset) identifies no machine: not comparable either.
func SameSystemUUID(a, b string) (same, comparable bool) {
	x, okA := uuidBytes(a)
	y, okB := uuidBytes(b)
	if !okA || !okB || isPlaceholder(x) || isPlaceholder(y) {
		return false, false
	}
	return slices.Contains(byteOrders(x), y), true
}

// byteOrders returns u in every byte order SameSystemUUID accepts: its closure under
// swapSMBIOS and reverse (at most 8), u first, then swapSMBIOS(u), reverse(u).
func byteOrders(u [16]byte) [][16]byte {
	out := [][16]byte{u}
	for i := 0; i < len(out); i++ {
		for _, f := range [][16]byte{swapSMBIOS(out[i]), reverse(out[i])} {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// CanonicalUUID returns u as a lower-case, hyphenated UUID in the byte order it was
// written in; "" when u is not a UUID (see SameSystemUUID for the forms accepted) or
// is a placeholder: no evidence of a machine.
func CanonicalUUID(u string) string {
	b, ok := uuidBytes(u)
	if !ok || isPlaceholder(b) {
		return ""
	}
	return formatUUID(b)
}

// reverse reverses all 16 bytes.
func reverse(u [16]byte) [16]byte {
	for i, j := 0, 15; i < j; i, j = i+1, j-1 {
		u[i], u[j] = u[j], u[i]
	}
	return u
}

// uuidBytes parses a UUID written with hyphens (8-4-4-4-12) or without (32 hex
// digits), optionally in braces.
func uuidBytes(s string) ([16]byte, bool) {
	var out [16]byte
	s = strings.TrimSpace(s)
	if len(s) > 2 && s[0] == '{' && s[len(s)-1] == '}' {
		s = s[1 : len(s)-1]
	}
	switch {
	case uuidRE.MatchString(s):
		s = strings.ReplaceAll(s, "-", "")
	case len(s) != 32:
		return out, false
	}
	raw, err := hex.DecodeString(s)
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
	for _, f := range byteOrders(b) {
		out = append(out, formatUUID(f))
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
		for _, f := range byteOrders(b) {
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

// NodeSystemUUID is the Node's systemUUID as evidence of its machine: "" when the
// kubelet reported none, or when it reported the machine ID in its place (on a machine
// without an SMBIOS UUID, /sys/class/dmi/id/product_uuid missing, the kubelet reports
// /etc/machine-id, 32 hex digits that name an installation, not the hardware: comparing
// it with an inventory or BMC UUID would make every such Node a mismatch).
func NodeSystemUUID(node *v1.Node) string {
	u, mid := node.Status.NodeInfo.SystemUUID, node.Status.NodeInfo.MachineID
	if mid != "" && strings.EqualFold(strings.ReplaceAll(u, "-", ""), strings.ReplaceAll(mid, "-", "")) {
		return ""
	}
	return u
}
