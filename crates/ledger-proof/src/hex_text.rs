//! Lowercase hexadecimal text for fixed-size byte strings.
//!
//! Every hash, key and signature in a checkpoint, rotation statement or proof file is written as
//! lowercase hex. Only lowercase is accepted on the way in, so that one value has exactly one
//! spelling and a signed text rebuilt from parsed values is the text that was signed.

use thiserror::Error;

/// Why a hexadecimal field was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HexError {
    /// The field has the wrong number of hex digits for what it holds (a 32-byte hash takes 64):
    /// it was cut short, padded, or is a different kind of value.
    #[error("expected {expected} hex digits, found {found}")]
    Length {
        /// Number of hex digits the field must have.
        expected: usize,
        /// Number of characters it had.
        found: usize,
    },
    /// The field holds a character other than `0-9` and `a-f`. Upper-case digits are refused
    /// too, because a second spelling of the same value would make signed texts ambiguous.
    #[error("not lowercase hexadecimal")]
    NotLowercaseHex,
}

/// Parses exactly `2 * N` lowercase hex digits into `N` bytes.
pub(crate) fn decode<const N: usize>(text: &str) -> Result<[u8; N], HexError> {
    if text.len() != 2 * N {
        return Err(HexError::Length {
            expected: 2 * N,
            found: text.len(),
        });
    }
    let mut bytes = [0u8; N];
    // Each digit's value, or a bit above any value for what is not a lowercase digit: one
    // test after the loop instead of a branch on every character.
    let mut bad = 0u16;
    for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        let (high, low) = (DIGITS[usize::from(pair[0])], DIGITS[usize::from(pair[1])]);
        bad |= high | low;
        *byte = ((high << 4) | low) as u8;
    }
    if bad > 0xf {
        return Err(HexError::NotLowercaseHex);
    }
    Ok(bytes)
}

/// The value of each lowercase hex digit, `0x100` for every other byte.
const DIGITS: [u16; 256] = {
    let mut table = [0x100u16; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u16;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u16;
        i += 1;
    }
    table
};

/// Implements `Display`, `Debug`, `FromStr`, `Serialize` and `Deserialize` as lowercase hex for
/// a newtype over `[u8; N]`, so the JSON forms of all byte values follow one rule.
macro_rules! hex_newtype {
    ($name:ident, $len:expr) => {
        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&::hex::encode(self.0))
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self)
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::hex_text::HexError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                $crate::hex_text::decode::<$len>(text).map(Self)
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                text.parse().map_err(::serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use hex_newtype;
