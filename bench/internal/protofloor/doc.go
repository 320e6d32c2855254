// Package protofloor holds the tests of bench/protofloor.c, the C floor
// of the anvil, policy and throttle protocols that bench/anvil.sh,
// bench/policy.sh (through bench/policybench) and bench/throttle.sh build
// with cc and measure beside sluice. Go refuses C files in a package that
// does not use cgo, so the source stays in bench/ and its tests live here.
package protofloor
