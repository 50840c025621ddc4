// Package repo holds mkrepo.sh, which makes the signed apt and yum
// repository of the packages (`make repo`); its test runs the script.
package repo
