// Package archtest holds no code, only tests of the repository's shape:
// the import direction of docs/architecture.md ("Dependencies") over
// `go list -deps` (cmd -> cli -> app -> protocol front ends, governor ->
// limiter -> store, with config and rules below; cli -> muxd -> mux,
// socketmap -> pool, the multiplexor's side importing nothing of the
// governor's), and the doc comments every package and exported name must
// have (TestDocComments).
package archtest
