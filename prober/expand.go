package prober

import (
	"strings"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
)

// expandCommand replaces $(VAR) in cmd with the value of the env var VAR
// of env, with the syntax of a container's command: "$$" is a literal "$",
// a reference to a variable env does not define stays as written, and only
// literal values count (a valueFrom variable expands to ""), as the
// kubelet's ExpandContainerCommandOnlyStatic. cmd is not modified.
func expandCommand(cmd []string, env []v1.EnvVar) []string {
	if len(cmd) == 0 {
		return nil
	}
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = expand(s, env)
	}
	return out
}

func lookupEnv(env []v1.EnvVar, name string) (string, bool) {
	val, found := "", false
	// The last definition wins, as in a map built in order.
	for i := range env {
		if env[i].Name == name {
			val, found = env[i].Value, true
		}
	}
	return val, found
}

func expand(s string, env []v1.EnvVar) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(s); cursor++ {
		if s[cursor] != '$' || cursor+1 >= len(s) {
			continue
		}
		b.WriteString(s[checkpoint:cursor])
		rest := s[cursor+1:]
		advance := 1
		switch rest[0] {
		case '$':
			// An escaped operator.
			b.WriteByte('$')
		case '(':
			end := strings.IndexByte(rest[1:], ')')
			if end < 0 {
				// An incomplete reference stays as written.
				b.WriteString("$(")
				break
			}
			name := rest[1 : 1+end]
			if val, ok := lookupEnv(env, name); ok {
				b.WriteString(val)
			} else {
				b.WriteString("$(" + name + ")")
			}
			advance = end + 2
		default:
			// Not a reference: the operator and the rune after it.
			r, size := utf8.DecodeRuneInString(rest)
			b.WriteByte('$')
			b.WriteRune(r)
			advance = size
		}
		cursor += advance
		checkpoint = cursor + 1
	}
	return b.String() + s[checkpoint:]
}
