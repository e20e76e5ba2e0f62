package eventrec

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	clienttesting "k8s.io/client-go/testing"
)

// TestRepeatIsCounted: with the smaller caches an event repeated on the same object
// is still one Event whose count is raised (a patch), also after events on other
// objects in between (fewer than fit the caches).
func TestRepeatIsCounted(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := NewBroadcaster(ctx)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "test"})
	svc := func(i int) *v1.Service {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i), UID: "u"}}
	}
	rec.Event(svc(0), v1.EventTypeNormal, "IPAllocated", "198.18.0.1")
	rec.Event(svc(0), v1.EventTypeNormal, "IPAllocated", "198.18.0.1")
	for i := 1; i < CacheSize/4; i++ { // distinct objects, fewer than fit
		rec.Event(svc(i), v1.EventTypeNormal, "IPAllocated", "198.18.0.2")
	}
	rec.Event(svc(0), v1.EventTypeNormal, "IPAllocated", "198.18.0.1")

	deadline := time.Now().Add(30 * time.Second)
	for {
		creates, patches := 0, 0
		for _, a := range client.Actions() {
			if a.GetResource().Resource != "events" {
				continue
			}
			switch a.(type) {
			case clienttesting.CreateAction:
				creates++
			case clienttesting.PatchAction:
				patches++
			}
		}
		if creates == CacheSize/4 && patches == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d creates and %d patches, want %d creates (one per object) and 2 patches (the repeats of svc-0)", creates, patches, CacheSize/4)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
