//go:build linux

package config

import "fmt"

// maxTOMLNesting bounds how deep arrays and inline tables nest in the
// agent's TOML. Its schema needs two levels (a table, an array of strings);
// the TOML decoder's time and memory grow steeply with depth (16,000
// nested inline tables in 64 KB took 31 s and 10.5 GB), so deeper input is
// refused before decoding.
const maxTOMLNesting = 16

type nestingError struct {
	line  int
	depth int
}

func (e *nestingError) Error() string {
	return fmt.Sprintf("arrays and inline tables nest more than %d deep here; the agent's keys need at most 2", e.depth)
}

// checkNesting scans TOML text for the depth of [ and { outside strings
// and comments, and reports the first line where it passes maxTOMLNesting.
// It does not otherwise parse: the decoder reports syntax errors.
func checkNesting(data []byte) *nestingError {
	depth, line := 0, 1
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\n':
			line++
		case c == '#':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i-- // let the newline count
		case c == '"' || c == '\'':
			delim := string(c)
			if i+2 < len(data) && data[i+1] == c && data[i+2] == c {
				delim = string([]byte{c, c, c})
			}
			i += len(delim)
			for i < len(data) {
				if data[i] == '\\' && c == '"' {
					i += 2
					continue
				}
				if data[i] == '\n' {
					if len(delim) == 1 {
						break // an unterminated string: the decoder says so
					}
					line++
				}
				if string(data[i:min(i+len(delim), len(data))]) == delim {
					i += len(delim) - 1
					break
				}
				i++
			}
			if i < len(data) && data[i] == '\n' {
				i--
			}
		case c == '[' || c == '{':
			depth++
			if depth > maxTOMLNesting {
				return &nestingError{line: line, depth: maxTOMLNesting}
			}
		case c == ']' || c == '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}
