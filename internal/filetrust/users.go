//go:build linux

package filetrust

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// The databases read: /etc/passwd and /etc/group (as the units' users are).
var (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
)

// records reads the colon-separated lines of file.
func records(file string) [][]string {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}

// groupMembers lists a group's members: its /etc/group list, and the users
// whose primary group it is.
func groupMembers(gid uint32) (name string, members []string, known bool) {
	id := strconv.FormatUint(uint64(gid), 10)
	for _, r := range records(groupFile) {
		if len(r) >= 4 && r[2] == id {
			name, known = r[0], true
			for _, m := range strings.Split(r[3], ",") {
				if m != "" {
					members = append(members, m)
				}
			}
		}
	}
	for _, r := range records(passwdFile) {
		if len(r) >= 4 && r[3] == id {
			members = append(members, r[0])
		}
	}
	return name, members, known
}

func passwdUID(name string) (uint32, bool) {
	for _, r := range records(passwdFile) {
		if len(r) >= 3 && r[0] == name {
			n, err := strconv.ParseUint(r[2], 10, 32)
			return uint32(n), err == nil
		}
	}
	return 0, false
}

func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	for _, r := range records(passwdFile) {
		if len(r) >= 3 && r[2] == id {
			return " (" + r[0] + ")"
		}
	}
	return ""
}
