package rules

import (
	"fmt"
	"slices"
	"strings"
)

// Counted says what a policy rule counts.
type Counted uint8

// What a rule can count.
const (
	CountMessages    Counted = iota + 1 // once per message
	CountRecipients                     // once per accepted recipient
	CountConnections                    // once per SMTP session
	CountBytes                          // the message size
)

var countedNames = [...]string{CountMessages: "messages", CountRecipients: "recipients", CountConnections: "connections", CountBytes: "bytes"}

// String is the name a configuration uses for c ("messages", "recipients", ...).
func (c Counted) String() string {
	if int(c) < len(countedNames) && countedNames[c] != "" {
		return countedNames[c]
	}
	return "?"
}

// ParseCounted parses "messages", "recipients", "connections" or "bytes".
func ParseCounted(s string) (Counted, error) {
	if s == "" {
		return 0, fmt.Errorf("say what the rule counts: messages, recipients, connections or bytes")
	}
	for i, n := range countedNames {
		if n != "" && n == s {
			return Counted(i), nil
		}
	}
	return 0, fmt.Errorf("%q is not one of messages, recipients, connections, bytes", s)
}

// Protocol states as Postfix names them.
const (
	StateConnect = "CONNECT"
	StateRcpt    = "RCPT"
	StateData    = "DATA"
	StateEOM     = "END-OF-MESSAGE"
)

// countStages are the stages a count may be taken at.
var countStages = []string{StateRcpt, StateData, StateEOM}

// ParseStage returns the stage at which c is counted, given the stage a
// rule names ("" for the default; any case). Messages and recipients are
// counted at RCPT, DATA or END-OF-MESSAGE (the default); bytes only at
// END-OF-MESSAGE, where Postfix sends the real size; connections once per
// session, so they take no stage and the result is "".
func ParseStage(c Counted, stage string) (string, error) {
	up := strings.ToUpper(stage)
	switch c {
	case CountMessages, CountRecipients:
		if up == "" {
			return StateEOM, nil
		}
		if !slices.Contains(countStages, up) {
			return up, fmt.Errorf("%q: %s are counted at RCPT, DATA or END-OF-MESSAGE", stage, c)
		}
		return up, nil
	case CountBytes:
		if up != "" && up != StateEOM {
			return StateEOM, fmt.Errorf("bytes are counted at END-OF-MESSAGE, where Postfix sends the real size")
		}
		return StateEOM, nil
	case CountConnections:
		if up != "" {
			return "", fmt.Errorf("connections are counted once per SMTP session, at its first query; stage does not apply")
		}
		return "", nil
	}
	return up, nil
}
