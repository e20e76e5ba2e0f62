package inventory

import "testing"

func TestSameSystemUUID(t *testing.T) {
	const u = "4c4c4544-0037-4a10-8052-b5c04f4e4d01"
	for _, c := range []struct {
		a, b             string
		same, comparable bool
	}{
		{u, u, true, true},
		{u, "4C4C4544-0037-4A10-8052-B5C04F4E4D01", true, true},
		{u, "44454c4c-3700-104a-8052-b5c04f4e4d01", true, true}, // SMBIOS order
		{u, "014d4e4f-c0b5-5280-104a-37004445 4c4c", false, false},
		{u, "014d4e4f-c0b5-5280-104a-37004445" + "4c4c", true, true}, // IPMI order: all bytes reversed
		{u, "4c4c4544-0037-4a10-8052-b5c04f4e4d02", false, true},
		{u, "", false, false},
		{"", "", false, false},
		{u, "not-a-uuid", false, false},
		// Placeholders identify no machine: never "same", never a contradiction.
		{"00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000", false, false},
		{u, "03000200-0400-0500-0006-000700080009", false, false},
		{u, "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", false, false},
	} {
		same, comparable := SameSystemUUID(c.a, c.b)
		if same != c.same || comparable != c.comparable {
			t.Errorf("SameSystemUUID(%q, %q) = %v, %v; want %v, %v", c.a, c.b, same, comparable, c.same, c.comparable)
		}
		if same2, comparable2 := SameSystemUUID(c.b, c.a); same2 != same || comparable2 != comparable {
			t.Errorf("not symmetric for %q, %q", c.a, c.b)
		}
	}
}

func TestUUIDForms(t *testing.T) {
	got := UUIDForms("4C4C4544-0037-4A10-8052-B5C04F4E4D01")
	want := []string{"4c4c4544-0037-4a10-8052-b5c04f4e4d01", "44454c4c-3700-104a-8052-b5c04f4e4d01", "014d4e4f-c0b5-5280-104a-370044454c4c",
		"014d4e4f-c0b5-5280-4a10-00374c4c4544", // all reversed after the SMBIOS swap
		"4f4e4d01-b5c0-8052-104a-370044454c4c", // swapped after the reversal
	}
	if len(got) < len(want) {
		t.Fatalf("UUIDForms = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("UUIDForms[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	if f := UUIDForms("00000000-0000-0000-0000-000000000000"); f != nil {
		t.Errorf("placeholder forms = %v", f)
	}
}

// TestSameSystemUUIDIsTransitive (issue 26): inventory UUID in SMBIOS order, Node UUID
// in RFC order and the IPMI GUID fully reversed from the SMBIOS bytes all name one
// machine, pairwise; hyphens are optional.
func TestSameSystemUUIDIsTransitive(t *testing.T) {
	const rfc = "4c4c4544-0037-4a10-8052-b5c04f4e4d01"
	b, _ := uuidBytes(rfc)
	smbios := formatUUID(swapSMBIOS(b))
	ipmi := formatUUID(reverse(swapSMBIOS(b)))
	forms := []string{rfc, smbios, ipmi, formatUUID(reverse(b)), "4C4C454400374A108052B5C04F4E4D01", "{" + smbios + "}"}
	for _, x := range forms {
		for _, y := range forms {
			if same, ok := SameSystemUUID(x, y); !same || !ok {
				t.Errorf("SameSystemUUID(%s, %s) = %v, %v; want the same machine", x, y, same, ok)
			}
		}
	}
	if same, ok := SameSystemUUID(ipmi, "4c4c4544-0037-4a10-8052-b5c04f4e4d02"); same || !ok {
		t.Errorf("another machine: %v, %v", same, ok)
	}
	if got := CanonicalUUID("4C4C454400374A108052B5C04F4E4D01"); got != rfc {
		t.Errorf("CanonicalUUID without hyphens = %q, want %s", got, rfc)
	}
	for _, p := range []string{"", "nope", "00000000000000000000000000000000", "09000800-0700-0600-0005-000400020003"} {
		if got := CanonicalUUID(p); got != "" {
			t.Errorf("CanonicalUUID(%q) = %q, want \"\" (no evidence)", p, got)
		}
	}
}
