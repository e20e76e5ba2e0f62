package bmc

import (
	"context"
	"sync"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// IdentityReader is implemented by a Driver that can also say which machine answered:
// ReadPower returns the raw power state and the system UUID the BMC reports for the
// system it read it from ("" when the BMC reports none). Service uses it when the
// Driver has it, and puts the UUID in Reading.SystemUUID.
type IdentityReader interface {
	ReadPower(ctx context.Context, t Target) (raw, systemUUID string, err error)
}

// identityTTL is how long a BMC's system UUID (or its answer that it reports none) is
// reused, keyed by address, port, TLS settings and credentials: a BMC's machine does
// not change under them, and a changed inventory entry or credential is read anew.
const identityTTL = 10 * time.Minute

// ReadPower implements IdentityReader. For Redfish the system's UUID comes with the
// power state, from the same GET of the host's ComputerSystem. For IPMI only an "off"
// answer — the one anything acts on — also reads the machine's identity, the system
// GUID (Get System GUID, "ipmitool raw 0x06 0x37"; a BMC that does not implement the
// command reports none), at most once per identityTTL for one address and
// credentials, so hosts that are on cost nothing extra. An IPMI "off" whose identity
// cannot be read is an ErrUnknownState error, never an unverified "off".
func (s *Sessions) ReadPower(ctx context.Context, t Target) (string, string, error) {
	if t.Protocol == inventory.ProtocolRedfish {
		return s.readRedfish(ctx, t)
	}
	return s.readIPMI(ctx, t, true)
}

// identities caches system UUIDs by target fingerprint.
type identities struct {
	mu   sync.Mutex
	byFP map[[32]byte]identity
}

type identity struct {
	uuid string
	at   time.Time
}

func (c *identities) get(ctx context.Context, fp [32]byte, read func(context.Context) (string, error)) (string, error) {
	c.mu.Lock()
	if id, ok := c.byFP[fp]; ok && time.Since(id.at) < identityTTL {
		c.mu.Unlock()
		return id.uuid, nil
	}
	c.mu.Unlock()
	uuid, err := read(ctx)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byFP == nil {
		c.byFP = map[[32]byte]identity{}
	}
	c.byFP[fp] = identity{uuid: uuid, at: time.Now()}
	return uuid, nil
}

// canonicalUUID is inventory.CanonicalUUID: lower case with hyphens (a BMC may send
// none); anything that is not a UUID, or a placeholder, is "" (no evidence).
func canonicalUUID(s string) string { return inventory.CanonicalUUID(s) }
