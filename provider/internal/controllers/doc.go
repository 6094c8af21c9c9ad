// Package controllers holds the provider's controllers, one file per resource produced.
//
// The boot services only read state; what they observe reaches the state through these
// controllers, which are the only writers of the resources they produce.
package controllers
