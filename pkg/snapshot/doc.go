// Package snapshot holds the vocabulary that crosses from the sources to
// the stats loop and on to the collectors: what a source hands the loop
// (zone samples and the meters' abilities, probe and profiler counters, GPU
// readings and their holders, the carbon factor), what it reports about
// itself, and what the stats loop publishes each interval. It depends on
// nothing but the standard library, so sources produce these types, the
// stats loop assembles them without importing any source, and collectors
// read them without importing any source.
package snapshot
