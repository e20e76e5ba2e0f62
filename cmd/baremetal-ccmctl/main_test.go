package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestManifests(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"manifests", "static-pod", "--image", "reg.example/ccm:v1", "--secure-port", "10300", "--", "--v=2"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"image: reg.example/ccm:v1", "--secure-port=10300", "port: 10300", "- --v=2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("static pod lacks %q", want)
		}
	}
	// Defaults print exactly the packaged manifests (minus their header comment).
	for args, file := range map[string]string{"static-pod": "static-pod.yaml", "rbac": "rbac.yaml"} {
		out.Reset()
		if code := run([]string{"manifests", args}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d", args, code)
		}
		packaged, err := os.ReadFile("../../packaging/kubernetes/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(packaged), out.String()) {
			t.Errorf("baremetal-ccmctl manifests %s differs from packaging/kubernetes/%s", args, file)
		}
	}
	if code := run([]string{"manifests", "static-pod", "--config-dir", "relative"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "absolute") {
		t.Errorf("relative config dir: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"bogus"}, &out, &errb); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
}
