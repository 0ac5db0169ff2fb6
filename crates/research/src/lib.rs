//! The pure research domain.
