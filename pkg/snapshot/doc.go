// Package snapshot holds the vocabulary that crosses from the sources to
// the collectors: what a source reports about itself and what the stats
// loop publishes each interval. It depends on nothing but the standard
// library, so sources produce these types, the stats loop assembles them,
// and collectors read them without importing any source.
package snapshot
