package bmc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// CredentialSource resolves a Target's credentials. Errors wrap ErrCredentials and
// never carry a username or password.
type CredentialSource interface {
	Credentials(ctx context.Context, t Target) (Credentials, error)
}

// SecretKeyUsername and SecretKeyPassword are the keys of a BMC credentials Secret.
const (
	SecretKeyUsername = "username"
	SecretKeyPassword = "password"
)

// Secrets is the CredentialSource the CCM runs: a Target with a credentials Secret is
// read through client (a `get` of that one Secret, kept for TTL; Invalidate drops it
// early, for example after the BMC refused it), any other Target from its credentials
// file. A nil Secrets reads files only. It is safe for concurrent use.
type Secrets struct {
	ttl   time.Duration
	clock clock.PassiveClock

	mu     sync.Mutex
	client kubernetes.Interface
	cache  map[string]cachedSecret // by namespace/name
}

type cachedSecret struct {
	creds Credentials
	at    time.Time
}

// NewSecrets returns a CredentialSource reading Secrets through client (nil until
// SetClient: files only) and keeping each for ttl.
func NewSecrets(client kubernetes.Interface, ttl time.Duration, clk clock.PassiveClock) *Secrets {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Secrets{client: client, ttl: ttl, clock: clk, cache: map[string]cachedSecret{}}
}

// SetClient sets the client Secrets are read with (the CCM has one only once it is
// the leader).
func (s *Secrets) SetClient(client kubernetes.Interface) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.client = client
}

// Credentials implements CredentialSource.
func (s *Secrets) Credentials(ctx context.Context, t Target) (Credentials, error) {
	if t.SecretName == "" {
		return ReadCredentials(t.CredentialsFile)
	}
	ref := t.SecretNamespace + "/" + t.SecretName
	if s == nil {
		return Credentials{}, fmt.Errorf("%w: Secret %s: no Kubernetes client to read it with", ErrCredentials, ref)
	}
	now := s.clock.Now()
	s.mu.Lock()
	c, ok := s.cache[ref]
	client := s.client
	s.mu.Unlock()
	if ok && now.Sub(c.at) < s.ttl {
		return c.creds, nil
	}
	if client == nil {
		return Credentials{}, fmt.Errorf("%w: Secret %s: no Kubernetes client to read it with", ErrCredentials, ref)
	}
	sec, err := client.CoreV1().Secrets(t.SecretNamespace).Get(ctx, t.SecretName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return Credentials{}, fmt.Errorf("%w: Secret %s: %w", ErrCredentials, ref, err)
		}
		return Credentials{}, fmt.Errorf("%w: reading Secret %s: %w", ErrCredentials, ref, err)
	}
	creds := Credentials{Username: string(sec.Data[SecretKeyUsername]), Password: string(sec.Data[SecretKeyPassword])}
	if creds.Username == "" || creds.Password == "" {
		return Credentials{}, fmt.Errorf("%w: Secret %s lacks the %q or %q key", ErrCredentials, ref, SecretKeyUsername, SecretKeyPassword)
	}
	s.mu.Lock()
	s.cache[ref] = cachedSecret{creds: creds, at: now}
	s.mu.Unlock()
	return creds, nil
}

// Invalidate drops the cached copy of t's Secret, so the next call reads it again.
func (s *Secrets) Invalidate(t Target) {
	if s == nil || t.SecretName == "" {
		return
	}
	s.mu.Lock()
	delete(s.cache, t.SecretNamespace+"/"+t.SecretName)
	s.mu.Unlock()
}

// invalidator is implemented by sources that cache (Secrets).
type invalidator interface{ Invalidate(t Target) }

// credentialsOf resolves t's credentials through src (nil: t's credentials file).
func credentialsOf(ctx context.Context, src CredentialSource, t Target) (Credentials, error) {
	if src == nil {
		if t.SecretName != "" {
			return Credentials{}, fmt.Errorf("%w: Secret %s/%s: no Kubernetes client to read it with", ErrCredentials, t.SecretNamespace, t.SecretName)
		}
		return ReadCredentials(t.CredentialsFile)
	}
	c, err := src.Credentials(ctx, t)
	if err != nil && !errors.Is(err, ErrCredentials) {
		err = fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	return c, err
}
