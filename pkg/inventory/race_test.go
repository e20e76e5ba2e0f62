//go:build race

package inventory

// propertySeeds is how many random sequences TestGuardProperty runs: fewer under the
// race detector, which makes each about ten times slower.
const propertySeeds = 40
