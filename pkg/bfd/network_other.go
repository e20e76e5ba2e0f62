//go:build !linux

package bfd

import (
	"errors"
	"fmt"
)

func newUDPNetwork() (Network, error) {
	return nil, fmt.Errorf("bfd: single-hop BFD sockets (IP_RECVTTL, SO_BINDTODEVICE) are implemented for Linux only: %w", errors.ErrUnsupported)
}
