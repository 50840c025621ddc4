// Package scripts holds the packages' maintainer scripts (deb/, rpm/ and
// preinstall.sh, packaged by packaging/nfpm.yaml); its tests run them as
// root in a private mount namespace, with systemd's tools played by
// stand-ins, against a service user's process that lies about itself.
package scripts
