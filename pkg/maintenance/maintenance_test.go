package maintenance

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

func TestOf(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	cond := func(typ v1.NodeConditionType, s v1.ConditionStatus) v1.NodeCondition {
		return v1.NodeCondition{Type: typ, Status: s, Reason: "FirmwareUpdate", LastTransitionTime: since}
	}
	tests := []struct {
		name  string
		conds []v1.NodeCondition
		want  string // "" for no exemption, else the condition named
	}{
		{"none", nil, ""},
		{"ready only", []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionFalse)}, ""},
		{"planned", []v1.NodeCondition{cond(v1.NodeMaintenancePlanned, v1.ConditionTrue)}, "MaintenancePlanned"},
		{"in progress", []v1.NodeCondition{cond(v1.NodeMaintenanceInProgress, v1.ConditionTrue)}, "MaintenanceInProgress"},
		{"both: the more specific", []v1.NodeCondition{cond(v1.NodeMaintenancePlanned, v1.ConditionTrue), cond(v1.NodeMaintenanceInProgress, v1.ConditionTrue)}, "MaintenanceInProgress"},
		{"false", []v1.NodeCondition{cond(v1.NodeMaintenanceInProgress, v1.ConditionFalse)}, ""},
		{"unknown is no evidence of maintenance", []v1.NodeCondition{cond(v1.NodeMaintenanceInProgress, v1.ConditionUnknown)}, ""},
		{"draining is not maintenance", []v1.NodeCondition{cond(v1.NodeDrainInProgress, v1.ConditionTrue), cond(v1.NodeDrained, v1.ConditionTrue)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Of(&v1.Node{Status: v1.NodeStatus{Conditions: tt.conds}})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Of = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, inventory.ErrMaintenance) {
				t.Fatalf("Of = %v, want an inventory.ErrMaintenance", err)
			}
			for _, s := range []string{"Node condition " + tt.want + " is True", "since 2026-11-27T09:00:00Z", "reason FirmwareUpdate"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Of = %q, lacks %q", err, s)
				}
			}
		})
	}
}

func TestRemediation(t *testing.T) {
	node := func(labels map[string]string, conds ...v1.NodeCondition) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Status: v1.NodeStatus{Conditions: conds}}
	}
	if err := Remediation(node(nil)); err != nil {
		t.Errorf("plain Node: %v", err)
	}
	for _, v := range []string{"false", "0", "False"} {
		if err := Remediation(node(map[string]string{ExcludeLabel: v})); err != nil {
			t.Errorf("label %q: %v", v, err)
		}
	}
	for _, v := range []string{"true", "yes", "", "1"} {
		if err := Remediation(node(map[string]string{ExcludeLabel: v})); !errors.Is(err, ErrExcluded) || !strings.Contains(err.Error(), ExcludeLabel) {
			t.Errorf("label %q: %v, want ErrExcluded naming the label", v, err)
		}
	}
	in := v1.NodeCondition{Type: v1.NodeMaintenanceInProgress, Status: v1.ConditionTrue}
	if err := Remediation(node(nil, in)); !errors.Is(err, inventory.ErrMaintenance) {
		t.Errorf("MaintenanceInProgress: %v, want ErrMaintenance", err)
	}
}

func TestEnded(t *testing.T) {
	at := func(m int) metav1.Time { return metav1.NewTime(time.Date(2026, 11, 27, 9, m, 0, 0, time.UTC)) }
	n := &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
		{Type: v1.NodeReady, Status: v1.ConditionFalse, LastTransitionTime: at(50)},
		{Type: v1.NodeMaintenancePlanned, Status: v1.ConditionFalse, LastTransitionTime: at(10)},
		{Type: v1.NodeMaintenanceInProgress, Status: v1.ConditionFalse, LastTransitionTime: at(20)},
	}}}
	if got := Ended(n); !got.Equal(at(20).Time) {
		t.Errorf("Ended = %v, want the later maintenance transition %v", got, at(20))
	}
	n.Status.Conditions[2].Status = v1.ConditionTrue // in maintenance: Planned's end counts
	if got := Ended(n); !got.Equal(at(10).Time) {
		t.Errorf("Ended = %v, want %v", got, at(10))
	}
	if got := Ended(&v1.Node{}); !got.IsZero() {
		t.Errorf("Ended without conditions = %v", got)
	}
}
