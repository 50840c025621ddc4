//go:build linux

package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestKeyDocsMatchTheLoader checks KeyDocs (the README's key table and envoy-agent.toml(5))
// against the loader: every key it accepts, in order, each with the loader's default and the
// reload behaviour the reload code applies.
func TestKeyDocsMatchTheLoader(t *testing.T) {
	var want []string
	for _, k := range tomlKeys(EnvoyConfig{}) {
		want = append(want, "envoy."+k)
	}
	for _, k := range tomlKeys(AgentConfig{}) {
		want = append(want, "agent."+k)
	}
	var got []string
	for _, k := range KeyDocs {
		got = append(got, k.Key)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("KeyDocs names\n  %v\nthe loader accepts\n  %v", got, want)
	}

	defaults := DefaultConfig()
	for _, k := range KeyDocs {
		t.Run(k.Key, func(t *testing.T) {
			table, key, _ := strings.Cut(k.Key, ".")
			var decoded Config
			doc := "[" + table + "]\n" + key + " = " + k.Default + "\n"
			if _, err := toml.Decode(doc, &decoded); err != nil {
				t.Fatalf("the documented default %s is not valid TOML for the key: %v", k.Default, err)
			}
			gotV, wantV := field(t, decoded, table, key), field(t, defaults, table, key)
			if !(gotV.Kind() == reflect.Slice && gotV.Len() == 0 && wantV.Len() == 0) && !reflect.DeepEqual(gotV.Interface(), wantV.Interface()) {
				t.Errorf("documented default %s, the loader's is %#v", k.Default, wantV.Interface())
			}
			restartOnlyKey := slices.ContainsFunc(restartOnly, func(r struct {
				key string
				get func(*Config) any
			}) bool {
				return r.key == k.Key
			})
			if (k.Reload == "no") != restartOnlyKey {
				t.Errorf("documented reload %q, but a reload refuses changing it: %v", k.Reload, restartOnlyKey)
			}
			if k.Meaning == "" || strings.HasSuffix(k.Meaning, ".") {
				t.Errorf("meaning %q: want a phrase without a final period", k.Meaning)
			}
		})
	}
}

// field is the value of [table] key in c.
func field(t *testing.T, c Config, table, key string) reflect.Value {
	t.Helper()
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if strings.Split(v.Type().Field(i).Tag.Get("toml"), ",")[0] != table {
			continue
		}
		tv := v.Field(i)
		for j := range tv.NumField() {
			if strings.Split(tv.Type().Field(j).Tag.Get("toml"), ",")[0] == key {
				return tv.Field(j)
			}
		}
	}
	t.Fatalf("no [%s] %s in Config", table, key)
	return reflect.Value{}
}
