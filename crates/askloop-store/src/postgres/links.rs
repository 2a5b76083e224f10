//! Answer links in PostgreSQL: one statement each (create, find, use, release, revoke,
//! prune), and the [`AnswerLinks`] implementation of [`PgStore`]. A use is a conditional
//! `UPDATE … RETURNING`: of racing uses, in any number of processes, one gets the row.

use async_trait::async_trait;

use askloop_core::store::{AnswerLink, AnswerLinks, LinkHash, LinkId, NewAnswerLink};
use askloop_core::{RunKey, StoreError, ToolCallId};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::links::{LINK_COLUMNS, LinkRow, decode_link, encode_issuer};
use crate::postgres::PgStore;
use crate::postgres::error::backend;

/// A time or count as BIGINT (saturating).
fn big(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A BIGINT read back.
fn small(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn link(row: &PgRow) -> Result<AnswerLink, StoreError> {
    let get = |error: sqlx::Error| backend(error);
    Ok(decode_link(LinkRow {
        id: small(row.try_get("id").map_err(get)?),
        scope: row.try_get("scope").map_err(get)?,
        run_id: row.try_get("run_id").map_err(get)?,
        tool_call_id: row.try_get("tool_call_id").map_err(get)?,
        role: row.try_get("role").map_err(get)?,
        issuer: row.try_get("issuer").map_err(get)?,
        created_at_ms: small(row.try_get("created_at_ms").map_err(get)?),
        expires_at_ms: small(row.try_get("expires_at_ms").map_err(get)?),
        used_at_ms: row
            .try_get::<Option<i64>, _>("used_at_ms")
            .map_err(get)?
            .map(small),
        revoked_at_ms: row
            .try_get::<Option<i64>, _>("revoked_at_ms")
            .map_err(get)?
            .map(small),
    }))
}

#[async_trait]
impl AnswerLinks for PgStore {
    async fn create_link(&self, new: &NewAnswerLink) -> Result<AnswerLink, StoreError> {
        // The insert, or (the hash exists) the stored row: one statement either way.
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH inserted AS ( \
               INSERT INTO answer_links (token_hash, scope, run_id, tool_call_id, role, \
                 issuer, created_at_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
               ON CONFLICT (token_hash) DO NOTHING RETURNING {LINK_COLUMNS}) \
             SELECT {LINK_COLUMNS} FROM inserted \
             UNION ALL SELECT {LINK_COLUMNS} FROM answer_links WHERE token_hash = $1 \
             LIMIT 1"
        )))
        .bind(new.hash.to_hex())
        .bind(new.run.scope())
        .bind(new.run.run_id.as_str())
        .bind(new.tool_call_id.as_str())
        .bind(new.role.as_deref())
        .bind(encode_issuer(new.issuer.as_ref()))
        .bind(big(new.created_at_ms))
        .bind(big(new.expires_at_ms))
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        match row {
            Some(row) => link(&row),
            // Another process inserted the same hash while this statement ran (its snapshot
            // predates that row): read it now.
            None => self
                .find_link(&new.hash)
                .await?
                .ok_or_else(|| backend(sqlx::Error::RowNotFound)),
        }
    }

    async fn find_link(&self, hash: &LinkHash) -> Result<Option<AnswerLink>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {LINK_COLUMNS} FROM answer_links WHERE token_hash = $1"
        )))
        .bind(hash.to_hex())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        row.as_ref().map(link).transpose()
    }

    async fn use_link(
        &self,
        hash: &LinkHash,
        now_ms: u64,
    ) -> Result<Option<AnswerLink>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE answer_links SET used_at_ms = $2 WHERE token_hash = $1 \
             AND used_at_ms IS NULL AND revoked_at_ms IS NULL AND expires_at_ms > $2 \
             RETURNING {LINK_COLUMNS}"
        )))
        .bind(hash.to_hex())
        .bind(big(now_ms))
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        row.as_ref().map(link).transpose()
    }

    async fn release_link(&self, id: LinkId, used_at_ms: u64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE answer_links SET used_at_ms = NULL WHERE id = $1 AND used_at_ms = $2 \
             AND revoked_at_ms IS NULL",
        )
        .bind(big(id.0))
        .bind(big(used_at_ms))
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(done.rows_affected() > 0)
    }

    async fn revoke_links(
        &self,
        run: &RunKey,
        tool_call_id: &ToolCallId,
        now_ms: u64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE answer_links SET revoked_at_ms = $4 WHERE scope = $1 AND run_id = $2 \
             AND tool_call_id = $3 AND revoked_at_ms IS NULL",
        )
        .bind(run.scope())
        .bind(run.run_id.as_str())
        .bind(tool_call_id.as_str())
        .bind(big(now_ms))
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(done.rows_affected())
    }

    async fn prune_links(&self, older_than_ms: u64, limit: usize) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM answer_links WHERE id IN (SELECT id FROM answer_links \
             WHERE expires_at_ms < $1 OR used_at_ms < $1 OR revoked_at_ms < $1 \
             ORDER BY id LIMIT $2)",
        )
        .bind(big(older_than_ms))
        .bind(big(limit as u64))
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(done.rows_affected())
    }
}
