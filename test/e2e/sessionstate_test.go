//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/apis/baremetalccm/v1alpha1"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/generated/clientset/versioned"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/manifests"
	"github.com/baremetal-ccm/baremetal-ccm/test/e2e/framework"
)

// sessionState is node's object for peer as a speaker writes it.
func sessionState(node, peer, speaker string) *v1alpha1.BGPSessionState {
	return &v1alpha1.BGPSessionState{
		ObjectMeta: metav1.ObjectMeta{Name: node + "." + peer, Labels: map[string]string{v1alpha1.LabelNode: node}},
		Spec:       v1alpha1.BGPSessionStateSpec{Node: node, Peer: peer, Speaker: speaker},
		Status:     v1alpha1.BGPSessionStateStatus{BGPState: "active", Updated: &metav1.Time{Time: time.Now()}},
	}
}

// TestBGPSessionStateOwnNode: the packaged ValidatingAdmissionPolicy and the CRD's
// rules, in a real API server, keep every agent to its own node's BGPSessionState
// objects, whichever identity it has: a per-node client certificate (baremetal-ccmctl
// agent kubeconfig) or the agents' ServiceAccount with a token bound to a Pod on its
// node (a DaemonSet's). Another agent's credentials can neither create, update nor
// delete a node's objects, nor take their names; a token bound to no Pod writes
// nothing; the admin (not an agent) still can.
func TestBGPSessionStateOwnNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := framework.Shared()
	if err := framework.ApplyAgentRBAC(ctx, cp); err != nil {
		t.Fatal(err)
	}
	suffix := rand.String(4)
	w1, w2 := "ss-w1-"+suffix, "ss-w2-"+suffix
	for _, n := range []string{w1, w2} {
		if _, err := framework.CreateNode(ctx, cp.Client, framework.NodeSpec{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	admin := versioned.NewForConfigOrDie(jsonConfig(cp.RESTConfig))
	t.Cleanup(func() {
		ctx := context.Background()
		_ = framework.DeleteNodes(ctx, cp.Client, w1, w2)
		for _, n := range []string{w1, w2} {
			_ = admin.BaremetalCCMV1alpha1().BGPSessionStates().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: v1alpha1.LabelNode + "=" + n})
		}
	})
	certClient := func(node string) versioned.Interface {
		cfg, err := clientcmd.BuildConfigFromFlags("", framework.AgentKubeconfig(t, cp, nil, node))
		if err != nil {
			t.Fatal(err)
		}
		return versioned.NewForConfigOrDie(jsonConfig(cfg))
	}
	agent1, agent2 := certClient(w1), certClient(w2)
	api := func(c versioned.Interface) interface {
		Create(context.Context, *v1alpha1.BGPSessionState, metav1.CreateOptions) (*v1alpha1.BGPSessionState, error)
		Update(context.Context, *v1alpha1.BGPSessionState, metav1.UpdateOptions) (*v1alpha1.BGPSessionState, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	} {
		return c.BaremetalCCMV1alpha1().BGPSessionStates()
	}

	// Each agent writes its own node's object.
	if _, err := api(agent2).Create(ctx, sessionState(w2, "10.0.0.1", v1alpha1.SpeakerAgent), metav1.CreateOptions{}); err != nil {
		t.Fatalf("agent of %s creating its own object: %v", w2, err)
	}
	// The policy applies once the API server has loaded it: wait for the first refusal
	// (a write let through before then is undone).
	forged := sessionState(w2, "10.0.0.2", v1alpha1.SpeakerAgent)
	var refusal error
	err := framework.WaitFor(ctx, 30*time.Second, "the policy to refuse another node's object", func(ctx context.Context) (bool, error) {
		_, refusal = api(agent1).Create(ctx, forged, metav1.CreateOptions{})
		if refusal == nil {
			return false, api(admin).Delete(ctx, forged.Name, metav1.DeleteOptions{})
		}
		return apierrors.IsForbidden(refusal) || apierrors.IsInvalid(refusal), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantRefusal := func(what string, err error, reason metav1.StatusReason, words ...string) {
		t.Helper()
		if apierrors.ReasonForError(err) != reason {
			t.Errorf("%s: %v (reason %q), want refused with %s", what, err, apierrors.ReasonForError(err), reason)
			return
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: refusal %q does not say %q", what, err, w)
			}
		}
	}
	wantRefusal("agent of "+w1+" creating "+w2+"'s object", refusal, metav1.StatusReasonForbidden, manifests.AgentPolicy, "the agent of node "+w1+" may write only its own node", "not those of node "+w2)

	own, err := api(agent1).Create(ctx, sessionState(w1, "10.0.0.1", v1alpha1.SpeakerAgent), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("agent of %s creating its own object: %v", w1, err)
	}
	own.Status.BGPState = "established"
	if _, err := api(agent1).Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("agent of %s updating its own object: %v", w1, err)
	}
	theirs, err := admin.BaremetalCCMV1alpha1().BGPSessionStates().Get(ctx, w2+".10.0.0.1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirs.Status.BGPState = "established"
	_, err = api(agent1).Update(ctx, theirs, metav1.UpdateOptions{})
	wantRefusal("agent of "+w1+" updating "+w2+"'s object", err, metav1.StatusReasonForbidden, "not those of node "+w2)
	err = api(agent1).Delete(ctx, theirs.Name, metav1.DeleteOptions{})
	wantRefusal("agent of "+w1+" deleting "+w2+"'s object", err, metav1.StatusReasonForbidden, "not those of node "+w2)
	// An agent cannot pass its sessions off as a CCM replica's.
	posing := sessionState(w1, "10.0.0.8", v1alpha1.SpeakerReplica)
	_, err = api(agent1).Create(ctx, posing, metav1.CreateOptions{})
	wantRefusal("agent of "+w1+" writing spec.speaker Replica", err, metav1.StatusReasonForbidden, "may write only spec.speaker Agent")
	// Taking over the object by moving it to its own node: spec is immutable.
	moved := theirs.DeepCopy()
	moved.Spec.Node = w1
	_, err = api(agent1).Update(ctx, moved, metav1.UpdateOptions{})
	if err == nil {
		t.Errorf("agent of %s moved %s's object to its node", w1, w2)
	}
	// Squatting on another node's name with its own spec.node: the CRD ties the name to
	// spec.node and spec.peer.
	squat := sessionState(w1, "10.0.0.3", v1alpha1.SpeakerAgent)
	squat.Name = w2 + ".10.0.0.3"
	_, err = api(agent1).Create(ctx, squat, metav1.CreateOptions{})
	wantRefusal("an object named for "+w2+" with spec.node "+w1, err, metav1.StatusReasonInvalid, "metadata.name must be <spec.node>.<spec.peer>")
	mismatch := sessionState(w1, "10.0.0.4", v1alpha1.SpeakerAgent)
	mismatch.Spec.Peer = "10.0.0.5"
	_, err = api(agent1).Create(ctx, mismatch, metav1.CreateOptions{})
	wantRefusal("a name that is not the peer's", err, metav1.StatusReasonInvalid, "metadata.name must be")
	badPeer := sessionState(w1, "peer-x", v1alpha1.SpeakerAgent)
	_, err = api(admin).Create(ctx, badPeer, metav1.CreateOptions{})
	wantRefusal("spec.peer not an address", err, metav1.StatusReasonInvalid, "spec.peer", "must be an IPv4 or IPv6 address")

	// The agents' ServiceAccount: a token bound to a Pod on w1 is w1's agent.
	t.Run("ServiceAccount token bound to a Pod", func(t *testing.T) {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: manifests.Namespace, Name: "ss-agent-" + suffix},
			Spec: v1.PodSpec{NodeName: w1, ServiceAccountName: manifests.AgentServiceAccount,
				Containers: []v1.Container{{Name: "agent", Image: "registry.example/agent:v1"}}},
		}
		pod, err := cp.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cp.Client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
		token := func(bound *authenticationv1.BoundObjectReference) (versioned.Interface, kubernetes.Interface) {
			expiry := int64(3600)
			tr, err := cp.Client.CoreV1().ServiceAccounts(manifests.Namespace).CreateToken(ctx, manifests.AgentServiceAccount,
				&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, BoundObjectRef: bound}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cfg := &rest.Config{Host: cp.RESTConfig.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
			return versioned.NewForConfigOrDie(jsonConfig(cfg)), kubernetes.NewForConfigOrDie(cfg)
		}
		sa, core := token(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
		ssr, err := core.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ssr.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; !slices.Equal(got, authenticationv1.ExtraValue{w1}) {
			t.Fatalf("the Pod-bound token's user %+v carries node-name %v, want %s", ssr.Status.UserInfo, got, w1)
		}
		if _, err := api(sa).Create(ctx, sessionState(w1, "10.0.0.6", v1alpha1.SpeakerAgent), metav1.CreateOptions{}); err != nil {
			t.Errorf("the ServiceAccount bound to a Pod on %s creating %s's object: %v", w1, w1, err)
		}
		_, err = api(sa).Create(ctx, sessionState(w2, "10.0.0.6", v1alpha1.SpeakerAgent), metav1.CreateOptions{})
		wantRefusal("the ServiceAccount bound to a Pod on "+w1+" creating "+w2+"'s object", err, metav1.StatusReasonForbidden, "not those of node "+w2)
		// A token bound to no Pod names no node: it writes nothing.
		unbound, _ := token(nil)
		_, err = api(unbound).Create(ctx, sessionState(w1, "10.0.0.7", v1alpha1.SpeakerAgent), metav1.CreateOptions{})
		wantRefusal("the ServiceAccount's token bound to no Pod", err, metav1.StatusReasonForbidden, "names no node")
	})

	// The admin is no agent: it may clean up any node's objects.
	if err := api(admin).Delete(ctx, w2+".10.0.0.1", metav1.DeleteOptions{}); err != nil {
		t.Errorf("admin deleting %s's object: %v", w2, err)
	}
}

// jsonConfig is cfg speaking JSON (custom resources have no protobuf encoding).
func jsonConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	return c
}
