package omni

import _ "embed" // the icon

// Icon is how Omni shows the provider: an anvil, an SVG of our own.
//
//go:embed icon.svg
var Icon string
