package manifests

import (
	"bytes"
	"embed"
	"io/fs"
	"slices"
)

// crdFiles are the CustomResourceDefinitions hack/generate.sh writes from pkg/apis.
//
//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDs returns the project's CustomResourceDefinitions (baremetal-ccm.io) as one
// multi-document YAML stream, in file name order.
func CRDs() []byte {
	names, err := fs.Glob(crdFiles, "crds/*.yaml")
	if err != nil {
		panic(err) // the pattern is constant
	}
	slices.Sort(names)
	var b bytes.Buffer
	for i, n := range names {
		data, err := crdFiles.ReadFile(n)
		if err != nil {
			panic(err) // embedded
		}
		data = bytes.TrimPrefix(data, []byte("---\n"))
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(data)
	}
	return b.Bytes()
}
