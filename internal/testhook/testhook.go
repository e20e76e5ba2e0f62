// Package testhook holds hooks the e2e suite sets through environment variables to
// put the CCM into states that are otherwise a matter of timing (a leader frozen
// between deciding and writing). Each hook is off unless its variable is set; the
// CCM logs a warning at its start for every hook that is on. Never set them in
// production.
package testhook

import (
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Variables of the hooks.
const (
	// HoldBeforeClaimEnv is "<prefix>" or "<prefix>,<file>": the first time the CCM
	// is about to claim an address for a Service whose name starts with prefix
	// (after its leadership check), it stops the whole process (SIGSTOP) or, with a
	// file, waits until the file exists.
	HoldBeforeClaimEnv = "BAREMETAL_CCM_TEST_HOLD_BEFORE_CLAIM"
	// IgnoreServicesEnv is a prefix: the service controller ignores the Services
	// whose names start with it.
	IgnoreServicesEnv = "BAREMETAL_CCM_TEST_IGNORE_SERVICES"
)

var (
	mu   sync.Mutex
	held = map[string]bool{}
)

// Active returns the hooks that are on, for the start-up warning.
func Active() []string {
	var on []string
	for _, v := range []string{HoldBeforeClaimEnv, IgnoreServicesEnv} {
		if os.Getenv(v) != "" {
			on = append(on, v+"="+os.Getenv(v))
		}
	}
	return on
}

// HoldBeforeClaim is the HoldBeforeClaimEnv hook for the Service namespace/name;
// keysAndValues are logged with it (the addresses decided).
func HoldBeforeClaim(ctx context.Context, namespace, name string, keysAndValues ...any) {
	spec := os.Getenv(HoldBeforeClaimEnv)
	if spec == "" {
		return
	}
	prefix, file, _ := strings.Cut(spec, ",")
	key := namespace + "/" + name
	mu.Lock()
	first := strings.HasPrefix(name, prefix) && !held[key]
	held[key] = true
	mu.Unlock()
	if !first {
		return
	}
	logger := klog.FromContext(ctx).WithValues(keysAndValues...)
	if file == "" {
		logger.Info("Test hook: stopping the process before claiming", "service", key)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		logger.Info("Test hook: continued", "service", key)
		return
	}
	logger.Info("Test hook: waiting before claiming", "service", key, "until", file)
	for {
		if _, err := os.Stat(file); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	logger.Info("Test hook: continued", "service", key)
}

// Ignored is the IgnoreServicesEnv hook: whether the service controller ignores the
// Service name.
func Ignored(name string) bool {
	p := os.Getenv(IgnoreServicesEnv)
	return p != "" && strings.HasPrefix(name, p)
}
