//! A fresh database for one test on the PostgreSQL server the tests are given (shared by the
//! integration tests and the store's own unit tests, which include this file by path).

/// A fresh database on the PostgreSQL server named by `OPLEDGER_TEST_POSTGRES` (a URL such as
/// `postgres://postgres@127.0.0.1:55432/postgres`), as a store URL; dropped with the guard.
/// Without a server: `None`, with SKIPPED on the real stderr, unless `OPLEDGER_REQUIRE_POSTGRES`
/// is set (CI starts a server), where a missing one fails the test.
pub fn postgres_store(test: &str) -> Option<PostgresDb> {
    let Ok(admin) = std::env::var("OPLEDGER_TEST_POSTGRES") else {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_POSTGRES").is_none(),
            "OPLEDGER_REQUIRE_POSTGRES is set but OPLEDGER_TEST_POSTGRES names no server"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("SKIPPED: {test} on PostgreSQL: OPLEDGER_TEST_POSTGRES names no server\n")
                .as_bytes(),
        );
        return None;
    };
    let name = format!(
        "opledger_test_{}_{}",
        test.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        std::process::id()
    );
    let mut client = postgres::Client::connect(&admin, postgres::NoTls)
        .unwrap_or_else(|e| panic!("connecting to {admin}: {e}"));
    // One statement each: a database is not made inside a transaction block.
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .unwrap();
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let (base, _) = admin.rsplit_once('/').expect("a URL ending in /DATABASE");
    Some(PostgresDb {
        url: format!("{base}/{name}"),
        admin,
        name,
    })
}

/// A database made for one test, dropped when the test ends.
pub struct PostgresDb {
    pub url: String,
    admin: String,
    name: String,
}

impl Drop for PostgresDb {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
