//! Paths to the built example handler components.
