// Package strictyaml decodes YAML or JSON documents strictly: duplicate keys and
// fields the target type does not know are reported with their field path.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Unmarshal decodes data (YAML or JSON) into out. err is set when the document cannot
// be decoded at all (not YAML, wrong types, empty). Otherwise out is decoded and
// fieldErrs lists every unknown or duplicate field with its path (for example
// `unknown field "hosts[2].bmc.pasword"`), so a caller can report them together with
// its own validation errors.
func Unmarshal(data []byte, out any) (fieldErrs []error, err error) {
	js := data
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		// YAML (or empty): convert. JSON objects skip the (much slower) YAML parser.
		js, err = yaml.YAMLToJSONStrict(data)
		if err != nil && strings.Contains(err.Error(), "already set in map") {
			fieldErrs = append(fieldErrs, fmt.Errorf("duplicate key: %w", err))
			js, err = yaml.YAMLToJSON(data)
		}
		if err != nil {
			return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
		}
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, errors.New("document is empty")
	}
	strict, err := kjson.UnmarshalStrict(js, out, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("cannot decode: %w", err)
	}
	return append(fieldErrs, strict...), nil
}
