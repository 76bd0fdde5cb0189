//! `store_roles!`: declares the store's role traits with each signature written once, the `StoreOp` enum naming every method, and each role for every `StoreDecorator`.
//!
//! Expanded where it is invoked (`ports::store`), whose `StoreDecorator`, `Call` and
//! `StoreError` the expansion names.

/// Declares the store's role traits, the `StoreOp` enum naming every method, and each role
/// trait for every `StoreDecorator`.
///
/// Each method is written once, as `async fn name(&self, arg: Type, …) -> Result<Out, StoreError>`
/// followed by `as Variant;` (its `StoreOp`) or `as Variant { subtask: expr, lease: expr };`
/// (the `Call` fields a decorator keys on, from the arguments).
macro_rules! store_roles {
    ($(
        $(#[$trait_attr:meta])*
        pub trait $role:ident {
            $(
                $(#[$method_attr:meta])*
                async fn $method:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> Result<$out:ty, StoreError>
                    as $op:ident $({ $($key:ident: $value:expr),* $(,)? })?;
            )*
        }
    )*) => {
        $(
            $(#[$trait_attr])*
            #[async_trait::async_trait]
            pub trait $role: Send + Sync {
                $(
                    $(#[$method_attr])*
                    async fn $method(&self $(, $arg: $ty)*) -> Result<$out, StoreError>;
                )*
            }

            #[async_trait::async_trait]
            impl<D: StoreDecorator> $role for D {
                $(
                    async fn $method(&self $(, $arg: $ty)*) -> Result<$out, StoreError> {
                        let call = Call {
                            $($($key: Some($value),)*)?
                            ..Call::of(StoreOp::$op)
                        };
                        self.around(call, self.inner().$method($($arg),*)).await
                    }
                )*
            }
        )*

        /// Every operation of the store's role traits, to name one (spans, injected faults).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum StoreOp {
            $($(
                #[doc = concat!("`", stringify!($role), "::", stringify!($method), "`")]
                $op,
            )*)*
        }

        impl StoreOp {
            /// Every operation, in declaration order.
            pub const ALL: &[StoreOp] = &[$($(StoreOp::$op,)*)*];

            /// The method's name (`db.operation.name`), e.g. `record_result`.
            pub fn name(self) -> &'static str {
                match self {
                    $($(StoreOp::$op => stringify!($method),)*)*
                }
            }
        }
    };
}

pub(crate) use store_roles;
