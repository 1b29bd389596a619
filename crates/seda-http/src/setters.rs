//! The `setters!` macro, a leaf: `with_FIELD(value) -> Self` setters for the
//! `#[non_exhaustive]` configurations ([`ServerConfig`](crate::ServerConfig), [`OverloadControl`](crate::OverloadControl)
//! and the settings they hold), whose struct literals code outside the crate
//! cannot write (seda's is the same macro, crate-private).

/// `setters!(Config { with_x: x: T, ... })`.
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
