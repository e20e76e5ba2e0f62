//go:build !race

package inventory

// propertySeeds is how many random sequences TestGuardProperty runs.
const propertySeeds = 150
