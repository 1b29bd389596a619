//! The `setters!` macro, a leaf: the configurations in `admission/` and `control/`
//! use it, and it uses nothing of the crate (in `lib.rs` it put lib.rs into a circle
//! with every file that invoked it).

/// `with_FIELD(value) -> Self` setters, one per listed field, for the
/// `#[non_exhaustive]` configurations (code outside the crate cannot write their
/// struct literals): `setters!(Config { with_x: x: f64, ... })`.
macro_rules! setters {
    ($ty:ident { $($setter:ident: $field:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
                #[must_use]
                pub fn $setter(mut self, $field: $t) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}
pub(crate) use setters;
