package strictyaml

import (
	"errors"
	"strings"
	"testing"
)

type doc struct {
	A string `json:"a"`
	B struct {
		C int `json:"c"`
	} `json:"b"`
}

func TestUnmarshal(t *testing.T) {
	for name, tc := range map[string]struct {
		in, wantErr string
	}{
		"yaml":                {"a: x\nb: {c: 1}\n", ""},
		"json":                {`{"a":"x","b":{"c":1}}`, ""},
		"unknown nested yaml": {"a: x\nb: {c: 1, d: 2}\n", `unknown field "b.d"`},
		"unknown nested json": {`{"a":"x","b":{"d":2}}`, `unknown field "b.d"`},
		"duplicate yaml":      {"a: x\na: z\n", `duplicate key`},
		"duplicate json":      {`{"a":"x","a":"y"}`, `duplicate field "a"`},
		"empty":               {"  \n", "document is empty"},
		"wrong type":          {"a: [1]\n", "cannot decode"},
		"broken json":         {`{"a":`, "cannot decode"},
	} {
		t.Run(name, func(t *testing.T) {
			var d doc
			fieldErrs, err := Unmarshal([]byte(tc.in), &d)
			if err == nil && len(fieldErrs) > 0 {
				err = errors.Join(fieldErrs...)
			}
			if tc.wantErr == "" {
				if err != nil || d.A != "x" {
					t.Fatalf("Unmarshal = %+v, %v", d, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// TestUnknownFieldsStillDecode: field errors do not stop decoding, so a caller can
// validate the rest and report everything at once.
func TestUnknownFieldsStillDecode(t *testing.T) {
	var d doc
	fieldErrs, err := Unmarshal([]byte("a: x\nzzz: 1\nb: {c: 7}\nb: {c: 8}\n"), &d)
	if err != nil {
		t.Fatal(err)
	}
	if len(fieldErrs) != 2 || d.A != "x" {
		t.Fatalf("fieldErrs = %v, decoded %+v", fieldErrs, d)
	}
}
