//! [`connected_fence!`](crate::fence::author::connected_fence): the fence contract
//! ([`Fence`](super::Fence)) on a store's fence and its connection, written once for every
//! fence package whose verbs take the connection first.

/// For fence packages: implements [`Fence`](crate::fence::Fence) for `$connected`, a store's
/// fence with a connection of its own, each verb forwarded to the fence's method of the same
/// name on the connection, the store's errors boxed ([`BoxError`](crate::fence::BoxError)).
/// `|this| fence, connection` say where they are in `this` (a `&$connected`): the fence an
/// expression with the methods `claim(connection, ticket)`, `seen(connection, scope)`,
/// `rebase(connection, scope, to)` and `fences(connection)`, the connection as they take it
/// (its temporaries, a mutex guard, live until the call ends). `$store` is
/// [`Fence::store`](crate::fence::Fence::store). A store that lists its fences otherwise (on
/// every node) gives `; fences: expr`, an expression of `this` whose future yields
/// `Result<Vec<FenceState>, BoxError>`.
///
/// # Examples
///
/// ```
/// use zkfence::fence::{Fence, FenceError, FenceState, FenceTicket};
///
/// #[derive(Debug)]
/// struct Conn;
/// struct MyFence;
/// type Failed = std::io::Error;
/// impl MyFence {
///     async fn claim(&self, _: &Conn, _: &FenceTicket) -> Result<Option<i64>, FenceError<Failed>> { Ok(None) }
///     async fn seen(&self, _: &Conn, _: &str) -> Result<Option<i64>, Failed> { Ok(Some(7)) }
///     async fn rebase(&self, _: &Conn, _: &str, _: i64) -> Result<Option<i64>, Failed> { Ok(None) }
///     async fn fences(&self, _: &Conn) -> Result<Vec<FenceState>, Failed> { Ok(Vec::new()) }
/// }
///
/// /// My fence with its connection.
/// struct Connected {
///     fence: MyFence,
///     conn: Conn,
/// }
/// zkfence::fence::author::connected_fence!(Connected, "my-store", |this| this.fence, &this.conn);
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let fence: Box<dyn Fence> = Box::new(Connected { fence: MyFence, conn: Conn });
/// assert_eq!(fence.store(), "my-store");
/// assert_eq!(fence.seen("/locks/a").await?, Some(7));
/// # Ok::<(), zkfence::fence::BoxError>(())
/// # })?;
/// # Ok::<(), zkfence::fence::BoxError>(())
/// ```
#[doc(hidden)]
#[macro_export]
macro_rules! __zkfence_connected_fence {
    ($connected:ty, $store:expr, |$this:ident| $fence:expr, $conn:expr) => {
        $crate::__zkfence_connected_fence!($connected, $store, |$this| $fence, $conn;
            fences: async {
                ::std::result::Result::<_, $crate::fence::BoxError>::Ok($fence.fences($conn).await?)
            });
    };
    ($connected:ty, $store:expr, |$this:ident| $fence:expr, $conn:expr; fences: $fences:expr) => {
        impl $crate::fence::Fence for $connected {
            fn store(&self) -> &'static str {
                $store
            }

            fn claim<'a>(
                &'a self,
                ticket: &'a $crate::fence::FenceTicket,
            ) -> $crate::fence::BoxFuture<
                'a,
                ::std::result::Result<
                    ::std::option::Option<i64>,
                    $crate::fence::FenceError<$crate::fence::BoxError>,
                >,
            > {
                ::std::boxed::Box::pin(async move {
                    let $this = self;
                    let outcome = $fence.claim($conn, ticket).await;
                    outcome.map_err(|e| {
                        e.map_store(|e| ::std::boxed::Box::new(e) as $crate::fence::BoxError)
                    })
                })
            }

            fn seen<'a>(
                &'a self,
                scope: &'a str,
            ) -> $crate::fence::BoxFuture<
                'a,
                ::std::result::Result<::std::option::Option<i64>, $crate::fence::BoxError>,
            > {
                ::std::boxed::Box::pin(async move {
                    let $this = self;
                    ::std::result::Result::Ok($fence.seen($conn, scope).await?)
                })
            }

            fn rebase<'a>(
                &'a self,
                scope: &'a str,
                to: i64,
            ) -> $crate::fence::BoxFuture<
                'a,
                ::std::result::Result<::std::option::Option<i64>, $crate::fence::BoxError>,
            > {
                ::std::boxed::Box::pin(async move {
                    let $this = self;
                    ::std::result::Result::Ok($fence.rebase($conn, scope, to).await?)
                })
            }

            fn fences(
                &self,
            ) -> $crate::fence::BoxFuture<
                '_,
                ::std::result::Result<
                    ::std::vec::Vec<$crate::fence::FenceState>,
                    $crate::fence::BoxError,
                >,
            > {
                ::std::boxed::Box::pin(async move {
                    let $this = self;
                    $fences.await
                })
            }
        }
    };
}
