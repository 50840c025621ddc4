//go:build linux

package output

import "bytes"

// LogLevel returns the level of one line of Envoy's log ("trace", "debug", "info", "warning",
// "error" or "critical"), read from the prefix Envoy writes: its default format
// "[2026-12-03 09:00:00.123][42][warning][config] [source/...:12] message", or the JSON format
// the agent asks for with LogAsJSON ({"level":"warning",...}). It returns "" for any other line
// (the continuation of a multi-line message, a configuration dump, a custom --log-format).
func LogLevel(line []byte) string {
	var lvl []byte
	switch {
	case bytes.HasPrefix(line, []byte(`{"level":"`)):
		rest := line[len(`{"level":"`):]
		i := bytes.IndexByte(rest, '"')
		if i < 0 {
			return ""
		}
		lvl = rest[:i]
	case bytes.HasPrefix(line, []byte("[")):
		// Skip [time][thread], take [level].
		rest := line
		for range 2 {
			i := bytes.Index(rest, []byte("]["))
			if i < 0 {
				return ""
			}
			rest = rest[i+1:]
		}
		i := bytes.IndexByte(rest, ']')
		if i < 0 {
			return ""
		}
		lvl = rest[1:i]
	default:
		return ""
	}
	switch string(lvl) {
	case "trace", "debug", "info", "warning", "error", "critical":
		return string(lvl)
	}
	return ""
}
