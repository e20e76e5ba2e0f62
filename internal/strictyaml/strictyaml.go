// Package strictyaml decodes YAML or JSON documents strictly: duplicate keys and
// fields the target type does not know are errors that name the field path.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Unmarshal decodes data (YAML or JSON) into out. Every unknown or duplicate field is
// reported, joined into one error, with its path (for example `unknown field
// "hosts[2].bmc.pasword"`).
func Unmarshal(data []byte, out any) error {
	js := data
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		// YAML (or empty): convert. JSON objects skip the (much slower) YAML parser.
		var err error
		if js, err = yaml.YAMLToJSONStrict(data); err != nil {
			return fmt.Errorf("not valid YAML or JSON: %w", err)
		}
	}
	if strings.TrimSpace(string(js)) == "null" {
		return errors.New("document is empty")
	}
	strict, err := kjson.UnmarshalStrict(js, out, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("cannot decode: %w", err)
	}
	if len(strict) > 0 {
		return errors.Join(strict...)
	}
	return nil
}
