//! C2SP `tlog-tiles` hash tiles (<https://c2sp.org/tlog-tiles>): the tree served as static
//! resources at `tile/<L>/<N>[.p/<W>]`.
//!
//! Tile `N` of level `L` holds, for `i` in `0..W`, the hash of the perfect subtree of height
//! `8·L` with index `N·256 + i`: at level 0 the leaf hashes, above each the root of a full tile
//! of the level below. A full tile is 256 hashes (8,192 bytes) and never changes; the rightmost
//! tile of a level in a tree of size `s` is partial, `floor(s / 256^L) mod 256` hashes wide,
//! and is served with the `.p/<W>` suffix.

use thiserror::Error;

/// Hashes in a full tile.
pub const TILE_WIDTH: u64 = 256;
/// Tile height in tree levels.
pub const TILE_HEIGHT: u8 = 8;

/// One tile: its level, its index in the level, and how many hashes it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    /// The tile level `L` (0..=63).
    pub level: u8,
    /// The index `N` within the level.
    pub index: u64,
    /// Hashes held: 256 for a full tile, 1..=255 for a partial one.
    pub width: u16,
}

/// Why a tile path was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("not a tile path: {0}")]
pub struct TilePathError(pub String);

impl Tile {
    /// Parses `<L>/<N>[.p/<W>]`, where `N` is in zero-padded 3-digit elements, every one but the
    /// last starting with `x`, and nothing has leading zeros it should not.
    pub fn parse(path: &str) -> Result<Self, TilePathError> {
        let bad = |why: &str| {
            TilePathError(format!(
                "{why}: {:?}",
                path.chars().take(80).collect::<String>()
            ))
        };
        let (path, width) = match path.split_once(".p/") {
            Some((rest, w)) => {
                let width = decimal(w).filter(|w| (1..TILE_WIDTH).contains(w));
                (
                    rest,
                    Some(width.ok_or_else(|| bad("the width is not 1 to 255"))?),
                )
            }
            None => (path, None),
        };
        let mut parts = path.split('/');
        let level = parts
            .next()
            .and_then(decimal)
            .filter(|l| *l <= 63)
            .ok_or_else(|| bad("the level is not 0 to 63"))?;
        let elements: Vec<&str> = parts.collect();
        let Some((last, leading)) = elements.split_last() else {
            return Err(bad("no index"));
        };
        let mut index: u64 = 0;
        for (i, element) in leading
            .iter()
            .map(|e| e.strip_prefix('x'))
            .chain([Some(*last)])
            .enumerate()
        {
            let digits = element.filter(|d| d.len() == 3 && d.bytes().all(|b| b.is_ascii_digit()));
            let Some(digits) = digits else {
                return Err(bad(
                    "an index element is not three digits (x-prefixed but the last)",
                ));
            };
            let value: u64 = digits.parse().map_err(|_| bad("index"))?;
            if i == 0 && value == 0 && !leading.is_empty() {
                return Err(bad("the index has a leading zero element"));
            }
            index = index
                .checked_mul(1000)
                .and_then(|n| n.checked_add(value))
                .ok_or_else(|| bad("the index is too large"))?;
        }
        Ok(Self {
            level: level as u8,
            index,
            width: width.map_or(TILE_WIDTH as u16, |w| w as u16),
        })
    }

    /// The path `<L>/<N>[.p/<W>]`.
    pub fn path(&self) -> String {
        let mut digits = Vec::new();
        let mut n = self.index;
        loop {
            digits.push(n % 1000);
            n /= 1000;
            if n == 0 {
                break;
            }
        }
        let elements: Vec<String> = digits
            .iter()
            .rev()
            .enumerate()
            .map(|(i, d)| {
                if i + 1 < digits.len() {
                    format!("x{d:03}")
                } else {
                    format!("{d:03}")
                }
            })
            .collect();
        let mut path = format!("{}/{}", self.level, elements.join("/"));
        if u64::from(self.width) < TILE_WIDTH {
            path.push_str(&format!(".p/{}", self.width));
        }
        path
    }

    /// Whether a tree of `tree_size` leaves has this tile (full, or partial of this width).
    pub fn exists_in(&self, tree_size: u64) -> bool {
        let Some(span) = TILE_WIDTH.checked_pow(u32::from(self.level) + 1) else {
            return false;
        };
        let full_tiles = tree_size / span;
        if u64::from(self.width) == TILE_WIDTH {
            return self.index < full_tiles;
        }
        let partial = (tree_size / (span / TILE_WIDTH)) % TILE_WIDTH;
        self.index == full_tiles && partial == u64::from(self.width)
    }

    /// The tree level of the hashes it holds, `8·L`.
    pub fn tree_level(&self) -> u8 {
        self.level * TILE_HEIGHT
    }

    /// The index, at [`Tile::tree_level`], of the first hash it holds.
    pub fn first_node(&self) -> u64 {
        self.index * TILE_WIDTH
    }
}

fn decimal(text: &str) -> Option<u64> {
    if text.is_empty()
        || !text.bytes().all(|b| b.is_ascii_digit())
        || (text.len() > 1 && text.starts_with('0'))
    {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_and_bad_ones_are_refused() {
        for (path, level, index, width) in [
            ("0/000", 0, 0, 256),
            ("0/x001/x234/067", 0, 1_234_067, 256),
            ("1/017.p/3", 1, 17, 3),
            ("2/x001/000.p/255", 2, 1000, 255),
        ] {
            let tile = Tile::parse(path).expect(path);
            assert_eq!((tile.level, tile.index, tile.width), (level, index, width));
            assert_eq!(tile.path(), path);
        }
        for bad in [
            "",
            "0",
            "0/1",
            "0/0000",
            "00/000",
            "64/000",
            "0/x000/001",
            "0/001/002",
            "0/000.p/0",
            "0/000.p/256",
            "0/000.p/07",
            "0/x01/000",
        ] {
            assert!(Tile::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn which_tiles_a_tree_has() {
        // C2SP's example: a tree of 70,000 leaves.
        let size = 70_000;
        let t = |level, index, width| Tile {
            level,
            index,
            width,
        };
        assert!(t(0, 272, 256).exists_in(size));
        assert!(!t(0, 273, 256).exists_in(size));
        assert!(t(0, 273, 112).exists_in(size));
        assert!(t(1, 0, 256).exists_in(size));
        assert!(t(1, 1, 17).exists_in(size));
        assert!(t(2, 0, 1).exists_in(size));
        assert!(!t(2, 0, 2).exists_in(size));
        assert!(!t(3, 0, 1).exists_in(size));
        assert!(t(1, 0, 1).exists_in(256));
    }
}
