//go:build linux

package config

import (
	"bytes"
	"fmt"
	"strings"
)

// maxTOMLNesting bounds how deep arrays and inline tables nest in the
// agent's TOML. Its schema needs two levels (a table, an array of strings);
// the TOML decoder's time and memory grow steeply with depth (16,000
// nested inline tables in 64 KB took 31 s and 10.5 GB), so deeper input is
// refused before decoding.
const maxTOMLNesting = 16

// maxKeyParts and maxKeyBytes bound one key or table header. The TOML
// decoder builds the whole dotted prefix again for each part of a key, so
// its memory grows with the square of the parts (2,000, 4,000 and 8,000
// parts took 74, 231 and 838 MB; 200 KB of "d.d.d…=1" reached 23 GB; a
// 100,000-part table header 46.8 s of CPU and 10 GB) and with parts times
// bytes. The agent's keys have two parts ("envoy.admin_port") and fewer
// than 40 bytes, so these leave room for any typo and none for that.
const (
	maxKeyParts = 16
	maxKeyBytes = 1024
)

// shapeError is TOML text refused before decoding: where, which key (a
// prefix of it), and why.
type shapeError struct {
	line int
	key  string
	msg  string
}

func (e *shapeError) Error() string { return e.msg }

func (e *shapeError) problem(file string) Problem {
	return Problem{File: file, Line: e.line, Key: e.key, Msg: e.msg}
}

// checkNesting scans TOML text, outside strings and comments, for the depth
// of [ and {, and for the parts and length of every key and table header,
// and reports the first place that passes maxTOMLNesting, maxKeyParts or
// maxKeyBytes. It does not otherwise parse: the decoder reports syntax
// errors. A key is a run of text between the delimiters = , [ ] { } and
// newlines: dots in a value are a float's one or a date's one, so a run
// with more than maxKeyParts-1 dots is refused wherever it stands.
func checkNesting(data []byte) *shapeError {
	depth, line := 0, 1
	// The current run: where it began, its dots, and whether it is a table
	// header's (a "[" first on its line, outside any value).
	segStart, segLine, dots, header := 0, 1, 0, false
	lineStart := true
	end := func(i int, isKey bool) *shapeError {
		// The key named is the whole run, to its next delimiter.
		stop := i
		if n := bytes.IndexAny(data[i:], "=,[]{}\n#"); n > 0 {
			stop = i + n
		} else if n < 0 {
			stop = len(data)
		}
		seg := strings.TrimSpace(string(data[segStart:stop]))
		switch {
		case dots+1 > maxKeyParts:
			return &shapeError{line: segLine, key: seg, msg: fmt.Sprintf("a key of %d or more dotted parts; the agent's keys have 2, and more than %d are refused before the file is decoded", dots+1, maxKeyParts)}
		case isKey && len(bytes.TrimSpace(data[segStart:i])) > maxKeyBytes:
			return &shapeError{line: segLine, key: seg, msg: fmt.Sprintf("a key of %d bytes; more than %d are refused before the file is decoded", len(bytes.TrimSpace(data[segStart:i])), maxKeyBytes)}
		}
		return nil
	}
	begin := func(i int) {
		segStart, segLine, dots = i, line, 0
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\n':
			if err := end(i, header); err != nil {
				return err
			}
			line++
			begin(i + 1)
			header, lineStart = false, true
			continue
		case c == '#':
			if err := end(i, header); err != nil {
				return err
			}
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i-- // let the newline count
			begin(i + 1)
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
		case c == '.':
			dots++
			if dots+1 > maxKeyParts {
				return end(i, false)
			}
		case c == '=':
			if err := end(i, true); err != nil {
				return err
			}
			begin(i + 1)
		case c == ',':
			if err := end(i, false); err != nil {
				return err
			}
			begin(i + 1)
		case c == '[' || c == '{':
			if c == '[' && lineStart && depth == 0 {
				header = true
				if i+1 < len(data) && data[i+1] == '[' {
					i++
				}
			} else {
				depth++
				if depth > maxTOMLNesting {
					return &shapeError{line: line, msg: fmt.Sprintf("arrays and inline tables nest more than %d deep here; the agent's keys need at most 2", maxTOMLNesting)}
				}
			}
			if err := end(i, false); err != nil {
				return err
			}
			begin(i + 1)
		case c == ']' || c == '}':
			if err := end(i, header && depth == 0); err != nil {
				return err
			}
			if header && depth == 0 {
				header = false
				if i+1 < len(data) && data[i+1] == ']' {
					i++
				}
			} else if depth > 0 {
				depth--
			}
			begin(i + 1)
		}
		if c != ' ' && c != '\t' && c != '\r' {
			lineStart = false
		}
	}
	return end(len(data), header)
}
