package lb

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// The leader keeps each pool's use where kubectl sees it, without a CRD: the
// ConfigMap PoolsConfigMap in the CCM's namespace holds the report as JSON (key
// PoolsKey) and as a table (key PoolsTableKey); `baremetal-ccmctl lb pools` prints it.
const (
	PoolsConfigMap = "baremetal-ccm-pools"
	PoolsKey       = "pools.json"
	PoolsTableKey  = "pools.txt"
)

// PoolReport is one pool's use.
type PoolReport struct {
	Name       string   `json:"name"`
	Addresses  []string `json:"addresses"`
	AutoAssign bool     `json:"autoAssign"`
	// Namespaces and Selector restrict the pool (empty: any Service).
	Namespaces []string      `json:"namespaces,omitempty"`
	Selector   string        `json:"selector,omitempty"`
	Families   []FamilyUsage `json:"families"`
	// Services is how many Services hold at least one of its addresses.
	Services int `json:"services"`
}

// FamilyUsage is a pool's use of one address family.
type FamilyUsage struct {
	Family string `json:"family"`
	Size   uint64 `json:"size"`
	InUse  uint64 `json:"inUse"`
	Free   uint64 `json:"free"`
}

// PoolsReport is what the ConfigMap holds.
type PoolsReport struct {
	Pools []PoolReport `json:"pools"`
}

// PoolReports returns every pool's use, in the allocator's order.
func (l *LoadBalancer) PoolReports() PoolsReport {
	services := l.alloc.PoolServices()
	byName := map[string]*PoolReport{}
	var r PoolsReport
	for _, p := range l.Pools() {
		pr := PoolReport{Name: p.Name, Addresses: slices.Clone(p.Addresses), AutoAssign: p.AutoAssignEnabled(), Namespaces: slices.Clone(p.Namespaces), Services: services[p.Name]}
		if p.ServiceSelector != nil {
			pr.Selector = metav1.FormatLabelSelector(p.ServiceSelector)
		}
		r.Pools = append(r.Pools, pr)
	}
	for i := range r.Pools {
		byName[r.Pools[i].Name] = &r.Pools[i]
	}
	for _, u := range l.alloc.Usage() {
		if p, ok := byName[u.Pool]; ok {
			p.Families = append(p.Families, FamilyUsage{Family: string(u.Family), Size: u.Size, InUse: u.Used, Free: u.Size - min(u.Used, u.Size)})
		}
	}
	return r
}

// Table renders the report for people: one line per pool and family.
func (r PoolsReport) Table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POOL\tFAMILY\tSIZE\tIN USE\tFREE\tUSED\tSERVICES\tAUTO-ASSIGN\tADDRESSES")
	for _, p := range r.Pools {
		if len(p.Families) == 0 {
			fmt.Fprintf(w, "%s\t-\t0\t0\t0\t-\t%d\t%v\t%s\n", p.Name, p.Services, p.AutoAssign, strings.Join(p.Addresses, ","))
		}
		for _, f := range p.Families {
			used := "-"
			if f.Size > 0 {
				used = fmt.Sprintf("%.0f%%", 100*float64(f.InUse)/float64(f.Size))
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%v\t%s\n", p.Name, f.Family, f.Size, f.InUse, f.Free, used, p.Services, p.AutoAssign, strings.Join(p.Addresses, ","))
		}
	}
	_ = w.Flush()
	return b.String()
}

// RunPoolStatus keeps the ConfigMap namespace/PoolsConfigMap equal to PoolReports,
// checking every interval and writing only when it changed, until ctx ends (the
// leadership term). A write that fails is retried at the next check. With a fence
// (SetFence), every write first asks it, so a replica that lost the Lease stops
// writing within the fence's cache even before its term's context ends.
func (l *LoadBalancer) RunPoolStatus(ctx context.Context, client kubernetes.Interface, namespace string, interval time.Duration) {
	logger := klog.FromContext(ctx).WithName("pool-status")
	last := ""
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		last = l.publishPoolStatus(ctx, logger, client, namespace, last)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// publishPoolStatus writes the pools' use if it differs from last and this replica
// still leads; it returns what the ConfigMap now holds as far as it knows.
func (l *LoadBalancer) publishPoolStatus(ctx context.Context, logger klog.Logger, client kubernetes.Interface, namespace, last string) string {
	l.mu.Lock()
	primed := l.primed
	l.mu.Unlock()
	if !primed { // before, the allocator does not know the Services yet
		return last
	}
	r := l.PoolReports()
	body, _ := json.MarshalIndent(r, "", "  ")
	if string(body) == last {
		return last
	}
	if _, fence := l.claims(); fence != nil {
		if err := fence(ctx); err != nil { // the new leader publishes
			logger.V(2).Info("Not publishing the pools' use", "reason", err)
			return last
		}
	}
	if err := writePoolStatus(ctx, client, namespace, string(body), r.Table()); err != nil {
		logger.Error(err, "Publishing the pools' use failed; retrying", "configMap", namespace+"/"+PoolsConfigMap)
		return last
	}
	return string(body)
}

func writePoolStatus(ctx context.Context, client kubernetes.Interface, namespace, body, table string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	data := map[string]string{PoolsKey: body, PoolsTableKey: table}
	cms := client.CoreV1().ConfigMaps(namespace)
	cm, err := cms.Get(ctx, PoolsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &v1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: PoolsConfigMap, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "baremetal-ccm"}},
			Data:       data,
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cm.Data = data
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
