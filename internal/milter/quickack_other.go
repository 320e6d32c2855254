//go:build !linux

package milter

import "syscall"

const quickAckSupported = false

func quickAck(syscall.RawConn) {}
