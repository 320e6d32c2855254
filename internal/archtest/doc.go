// Package archtest holds no code, only tests of the repository's shape:
// the import direction of docs/architecture.md ("Dependencies") over
// `go list -deps` (cmd -> cli -> app -> protocol front ends, governor ->
// limiter -> store, with config and rules below; cli -> muxd -> mux,
// socketmap -> pool, the multiplexor's side importing nothing of the
// governor's), the doc comments every package and exported name must
// have (TestDocComments), and the size limits of the code the module
// builds: no file over 700 lines, no function over 100
// (TestFileAndFunctionLimits).
package archtest
