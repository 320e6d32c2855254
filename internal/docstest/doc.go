// Package docstest holds the repository-wide documentation tests: the
// pages of docs/ and README.md checked against the code (configuration
// blocks that must pass sluice check, quoted messages, keys, flags,
// references, figures, the package layout and the vocabulary). It has no
// code of its own.
package docstest
