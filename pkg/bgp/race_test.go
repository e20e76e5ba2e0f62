//go:build race

package bgp

// raceEnabled: see TestBIRDTwoSpeakersECMP.
const raceEnabled = true
