//go:build linux

package frr

import "syscall"

// capabilities the daemons keep (the union of what zebra, bgpd and bfdd ask
// for), plus CAP_SETGID for their setgroups at start.
var capabilities = []uintptr{
	12, // CAP_NET_ADMIN
	13, // CAP_NET_RAW
	10, // CAP_NET_BIND_SERVICE
	21, // CAP_SYS_ADMIN
	6,  // CAP_SETGID
}

// daemonProcAttr runs a daemon as cred with the capabilities it keeps as ambient
// capabilities.
func daemonProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, AmbientCaps: capabilities}
}
