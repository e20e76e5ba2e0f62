package strictyaml

import (
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
		"duplicate yaml":      {"a: x\na: y\n", `"a" already set`},
		"duplicate json":      {`{"a":"x","a":"y"}`, `duplicate field "a"`},
		"empty":               {"  \n", "document is empty"},
		"wrong type":          {"a: [1]\n", "cannot decode"},
		"broken json":         {`{"a":`, "cannot decode"},
	} {
		t.Run(name, func(t *testing.T) {
			var d doc
			err := Unmarshal([]byte(tc.in), &d)
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
