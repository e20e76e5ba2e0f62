package bgp

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func durOf(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

func durEq(a, b *metav1.Duration) bool { return durOf(a) == durOf(b) && (a == nil) == (b == nil) }
