//go:build linux

package config

import (
	"reflect"
	"strings"
)

// tomlKeys lists the toml tag names of a struct's fields.
func tomlKeys(v any) []string {
	t := reflect.TypeOf(v)
	var keys []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}
