package config

import "k8s.io/apimachinery/pkg/util/validation/field"

// SetBGPPeerDefaults fills a peer's unset optional fields (also used for the
// inventory's per-rack peers).
func SetBGPPeerDefaults(p *BGPPeer) {}

// validateBGPSpeaker checks the speaker settings and peers.
func validateBGPSpeaker(b *BGPConfig, p *field.Path) field.ErrorList {
	return nil
}

// ValidateBGPPeer checks one peer (also used for the inventory's per-rack peers).
func ValidateBGPPeer(peer *BGPPeer, p *field.Path) field.ErrorList {
	return nil
}
