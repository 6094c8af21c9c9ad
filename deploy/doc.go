// Package deploy holds the examples of running the provider beside Omni (README.md): a
// systemd unit and its environment file, a Kubernetes manifest and a Compose file. Its
// tests check them against the provider's real flags and each format's own rules; it
// has no code.
package deploy
