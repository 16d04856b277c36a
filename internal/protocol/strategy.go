package protocol

import "strings"

// Strategy is the part of a waiting strategy that runs on the nodes. It is
// code for the hooks of the kernel's acquire and release scripts, each
// strategy over the one before it (see announce.lua).
type Strategy uint8

const (
	// Kernel is no waiting strategy: a refused acquire leaves the keys as
	// they are, and a release tells nobody.
	Kernel Strategy = iota
	// Announce marks a key that refused an acquire, and announces the
	// release of a marked key (announce.lua).
	Announce
	// InLine also keeps each key's waiters in line on the node, and the
	// announcement names the first in line (inline.lua).
	InLine
	// Handoff also hands a released key off on the node to the first in
	// line whose client listens (handoff.lua).
	Handoff
)

// hooks is the code of each hook of a strategy, by name.
type hooks map[string]string

// strategyHooks returns the hooks of s: the sections of its file and of
// the files of the strategies below it, in order. Each section is added to
// the code of its name, or replaces it when its name ends with "!".
func strategyHooks(s Strategy) hooks {
	h := hooks{}
	for _, file := range []string{announceLua, inLineLua, handoffLua}[:s] {
		for _, sec := range strings.Split(file, "\n--@@")[1:] {
			head, code, _ := strings.Cut(sec, "\n")
			code = strings.TrimRight(code, "\n")
			if name, ok := strings.CutSuffix(head, "!"); ok {
				h[name] = code
			} else if h[head] == "" {
				h[head] = code
			} else {
				h[head] += "\n" + code
			}
		}
	}
	return h
}

// fill returns lua with each hook mark, a line "--@name", replaced by the
// hook's code, or by nothing for a hook without code. The code is indented
// as the mark, and the marks in it are filled in the same way.
func (h hooks) fill(lua string) string {
	lines := strings.Split(lua, "\n")
	out := make([]string, 0, len(lines))
	for _, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		name, ok := strings.CutPrefix(trimmed, "--@")
		if !ok || strings.HasPrefix(name, "@") || strings.ContainsAny(name, " \t") {
			out = append(out, line)
			continue
		}
		if code := h[name]; code != "" {
			indent := line[:len(line)-len(trimmed)]
			for _, l := range strings.Split(h.fill(code), "\n") {
				if l != "" {
					l = indent + l
				}
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}
