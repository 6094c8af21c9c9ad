// Package control is the provider's control API, the one anvilctl talks to.
//
// It has two parts on one gRPC server: the COSI state API over a read-only view of the
// state, so every resource can be read and watched as with talosctl or omnictl, and the
// TransitionService, the only way a person changes what is asked of a machine. The
// service is a thin adapter: package transitions holds the rules, this package maps
// requests onto it and its refusals onto gRPC status codes. Beside them, the
// ImageCacheService lists, fills and prunes the provider's boot-asset cache
// (package imagecache), as thin an adapter.
package control
