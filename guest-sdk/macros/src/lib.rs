//! Procedural macros of `keel-sdk`: `#[workflow]`, `#[step]` and `component!`.
//!
//! The attributes keep the author's function readable and generate, beside
//! it, a hidden definition (`__keel_workflow_NAME` / `__keel_step_NAME`) that
//! `component!` collects into the component's exports.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{
    Expr, ExprLit, FnArg, Ident, ItemFn, Lit, Meta, MetaNameValue, Pat, Path, ReturnType, Token,
    Type, parse_macro_input,
};

/// Marks an `async fn` as a workflow.
///
/// The function takes at most one argument, the run's input (any
/// `serde::Deserialize` type), and returns `Result<T, E>` where `T` is
/// `serde::Serialize` and `E` is `Display`. Settings:
/// `idempotency(key = "input.id", ttl = "1m")` admits one run per key (a CEL
/// expression over `input` and `additional_metadata`) within the TTL;
/// `on_events = ["orders:created"]` starts a run for each such event;
/// `schedule(cron = "0 9 * * 1-5", tz = "Europe/Paris", overlap = "skip")`
/// (or `schedule(every = "5m")`, with optional `catchup = "10m"` and
/// `input = r#"{...}"#`) declares a schedule, created as
/// `DEPLOYMENT.WORKFLOW` when the component is deployed;
/// `concurrency(key = "input.tenant_id", limit = 2)` lets at most `limit`
/// runs of one key (a CEL expression like an idempotency key's; a constant
/// such as `"'all'"` makes one limit) be in progress at once, queueing the
/// rest, with `on_limit = "cancel_in_progress"` or `"cancel_newest"` to
/// cancel instead; `timeout = "2h"` cancels a run still going that long
/// after its admission, with reason `deadline_exceeded`;
/// `durability = "effect_gated"` (the default) makes what a step's effects
/// depend on durable before its first outbound effect (HTTP, a stream
/// chunk, a hook resume), so a step whose result was seen outside never
/// runs again; `"strict"` makes every step attempt's start durable before
/// it runs; `"relaxed"` makes steps' results durable only with the run's
/// next wait or its end (a crash may run steps again, under the same step
/// IDs).
#[proc_macro_attribute]
pub fn workflow(attr: TokenStream, item: TokenStream) -> TokenStream {
    let func = parse_macro_input!(item as ItemFn);
    let settings = parse_macro_input!(attr with Punctuated::<Meta, Token![,]>::parse_terminated);
    let result = WorkflowSettings::parse(&settings).and_then(|s| expand_workflow(&func, &s));
    result.unwrap_or_else(|e| e.to_compile_error()).into()
}

#[derive(Default)]
struct WorkflowSettings {
    idempotency: Option<(String, u64)>,
    on_events: Vec<String>,
    schedule: Option<ScheduleSettings>,
    /// `(key, limit, on_limit)`.
    concurrency: Option<(String, u32, String)>,
    /// `timeout = "2h"`, in ms.
    timeout_ms: Option<u64>,
    /// `durability = "..."`, if given.
    durability: Option<String>,
}

/// `concurrency(key = "...", limit = N, on_limit = "...")` of a workflow.
fn parse_concurrency(list: &syn::MetaList) -> syn::Result<(String, u32, String)> {
    let inner = list.parse_args_with(Punctuated::<MetaNameValue, Token![,]>::parse_terminated)?;
    let (mut key, mut limit, mut on_limit) = (None, None, "queue".to_string());
    for kv in &inner {
        let Expr::Lit(ExprLit { lit, .. }) = &kv.value else {
            return Err(syn::Error::new_spanned(&kv.value, "expected a literal"));
        };
        match (kv.path.get_ident().map(Ident::to_string).as_deref(), lit) {
            (Some("key"), Lit::Str(s)) => key = Some(s.value()),
            (Some("limit"), Lit::Int(n)) => limit = Some(n.base10_parse::<u32>()?),
            (Some("on_limit"), Lit::Str(s)) => {
                let value = s.value();
                if !["queue", "cancel_in_progress", "cancel_newest"].contains(&value.as_str()) {
                    return Err(syn::Error::new_spanned(
                        lit,
                        "on_limit is \"queue\", \"cancel_in_progress\" or \"cancel_newest\"",
                    ));
                }
                on_limit = value;
            }
            _ => {
                return Err(syn::Error::new_spanned(
                    kv,
                    "expected `key = \"CEL\"`, `limit = N` or `on_limit = \"...\"`",
                ));
            }
        }
    }
    match (key, limit) {
        (Some(key), Some(limit)) => Ok((key, limit, on_limit)),
        _ => Err(syn::Error::new_spanned(
            list,
            "concurrency needs both `key` and `limit`",
        )),
    }
}

/// `schedule(...)` of a workflow.
#[derive(Default)]
struct ScheduleSettings {
    cron: Option<String>,
    tz: Option<String>,
    every_ms: Option<u64>,
    overlap: Option<String>,
    catchup_ms: Option<u64>,
    input: Option<String>,
}

impl ScheduleSettings {
    fn parse(list: &syn::MetaList) -> syn::Result<Self> {
        let inner =
            list.parse_args_with(Punctuated::<MetaNameValue, Token![,]>::parse_terminated)?;
        let mut out = ScheduleSettings::default();
        for kv in &inner {
            let Expr::Lit(ExprLit { lit, .. }) = &kv.value else {
                return Err(syn::Error::new_spanned(&kv.value, "expected a literal"));
            };
            let text = || match lit {
                Lit::Str(s) => Ok(s.value()),
                _ => Err(syn::Error::new_spanned(lit, "expected a string")),
            };
            match kv.path.get_ident().map(Ident::to_string).as_deref() {
                Some("cron") => out.cron = Some(text()?),
                Some("tz") => out.tz = Some(text()?),
                Some("every") => out.every_ms = Some(duration_lit(lit)?),
                Some("catchup") => out.catchup_ms = Some(duration_lit(lit)?),
                Some("input") => out.input = Some(text()?),
                Some("overlap") => {
                    let overlap = text()?;
                    if !["skip", "buffer-one", "allow-all"].contains(&overlap.as_str()) {
                        return Err(syn::Error::new_spanned(
                            lit,
                            "overlap is \"skip\", \"buffer-one\" or \"allow-all\"",
                        ));
                    }
                    out.overlap = Some(overlap);
                }
                _ => {
                    return Err(syn::Error::new_spanned(
                        &kv.path,
                        "expected `cron`, `tz`, `every`, `overlap`, `catchup` or `input`",
                    ));
                }
            }
        }
        if out.cron.is_some() == out.every_ms.is_some() {
            return Err(syn::Error::new_spanned(
                list,
                "a schedule needs `cron = \"...\"` or `every = \"...\"`, not both",
            ));
        }
        if out.tz.is_some() && out.cron.is_none() {
            return Err(syn::Error::new_spanned(list, "`tz` goes with `cron`"));
        }
        Ok(out)
    }

    fn tokens(&self) -> TokenStream2 {
        let opt_str = |v: &Option<String>| match v {
            Some(s) => quote! { Some(#s) },
            None => quote! { None },
        };
        let opt_u64 = |v: &Option<u64>| match v {
            Some(n) => quote! { Some(#n) },
            None => quote! { None },
        };
        let (cron, tz, every, overlap, catchup, input) = (
            opt_str(&self.cron),
            opt_str(&self.tz),
            opt_u64(&self.every_ms),
            opt_str(&self.overlap),
            opt_u64(&self.catchup_ms),
            opt_str(&self.input),
        );
        quote! {
            Some(::keel_sdk::__private::ScheduleDef {
                cron: #cron, tz: #tz, every_ms: #every, overlap: #overlap,
                catchup_window_ms: #catchup, input: #input,
            })
        }
    }
}

impl WorkflowSettings {
    fn parse(settings: &Punctuated<Meta, Token![,]>) -> syn::Result<Self> {
        let mut out = WorkflowSettings::default();
        for setting in settings {
            match setting {
                Meta::List(list) if list.path.is_ident("idempotency") => {
                    let inner = list.parse_args_with(
                        Punctuated::<MetaNameValue, Token![,]>::parse_terminated,
                    )?;
                    let (mut key, mut ttl) = (None, None);
                    for kv in &inner {
                        let Expr::Lit(ExprLit { lit, .. }) = &kv.value else {
                            return Err(syn::Error::new_spanned(&kv.value, "expected a literal"));
                        };
                        match kv.path.get_ident().map(Ident::to_string).as_deref() {
                            Some("key") => match lit {
                                Lit::Str(s) => key = Some(s.value()),
                                _ => {
                                    return Err(syn::Error::new_spanned(
                                        lit,
                                        "the key is a CEL expression in a string",
                                    ));
                                }
                            },
                            Some("ttl") => ttl = Some(duration_lit(lit)?),
                            _ => {
                                return Err(syn::Error::new_spanned(
                                    &kv.path,
                                    "expected `key` or `ttl`",
                                ));
                            }
                        }
                    }
                    match (key, ttl) {
                        (Some(key), Some(ttl)) => out.idempotency = Some((key, ttl)),
                        _ => {
                            return Err(syn::Error::new_spanned(
                                list,
                                "idempotency needs both `key` and `ttl`",
                            ));
                        }
                    }
                }
                Meta::List(list) if list.path.is_ident("schedule") => {
                    out.schedule = Some(ScheduleSettings::parse(list)?);
                }
                Meta::List(list) if list.path.is_ident("concurrency") => {
                    out.concurrency = Some(parse_concurrency(list)?);
                }
                Meta::NameValue(kv) if kv.path.is_ident("timeout") => {
                    let Expr::Lit(ExprLit { lit, .. }) = &kv.value else {
                        return Err(syn::Error::new_spanned(
                            &kv.value,
                            "expected a duration such as \"2h\"",
                        ));
                    };
                    out.timeout_ms = Some(duration_lit(lit)?);
                }
                Meta::NameValue(kv) if kv.path.is_ident("durability") => {
                    out.durability = Some(match &kv.value {
                        Expr::Lit(ExprLit {
                            lit: Lit::Str(s), ..
                        }) if ["strict", "effect_gated", "relaxed"]
                            .contains(&s.value().as_str()) =>
                        {
                            s.value()
                        }
                        other => {
                            return Err(syn::Error::new_spanned(
                                other,
                                "expected durability = \"effect_gated\" (the default), \"strict\" or \"relaxed\"",
                            ));
                        }
                    });
                }
                Meta::NameValue(kv) if kv.path.is_ident("on_events") => {
                    let Expr::Array(array) = &kv.value else {
                        return Err(syn::Error::new_spanned(
                            &kv.value,
                            "expected a list of event keys",
                        ));
                    };
                    for elem in &array.elems {
                        match elem {
                            Expr::Lit(ExprLit {
                                lit: Lit::Str(s), ..
                            }) => out.on_events.push(s.value()),
                            other => {
                                return Err(syn::Error::new_spanned(other, "expected a string"));
                            }
                        }
                    }
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "unknown workflow setting; expected idempotency(key = ..., ttl = ...), on_events = [...], schedule(...), concurrency(key = ..., limit = ...), timeout = \"2h\" or durability = \"strict\"",
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// Marks an `async fn` as a step.
///
/// Calling the function from a workflow schedules the step and returns a
/// future of its result; the body runs in the step sandbox. Settings:
/// `max_retries = 3`, `initial_backoff = "1s"`, `backoff_factor = 2.0`,
/// `max_backoff = "60s"`, and `rate_limit(key = "'openai'", limit = 60,
/// per = "1m")`: at most `limit` attempts of the steps sharing the key (a
/// CEL expression over the step's `input`) start in any window of `per`,
/// across every worker; an attempt that finds none waits, without holding
/// an instance or counting as an attempt. `concurrency(key = "'db'",
/// limit = 2)`: at most `limit` attempts of the steps sharing the key run
/// at once, across every worker; an attempt over it waits the same way.
/// `retry_budget = "10m"`: a retry that would be due later than this after
/// the step's first attempt started fails the step instead, retries left
/// or not (the time budget of all its attempts; `--step-timeout` bounds
/// each one).
#[proc_macro_attribute]
pub fn step(attr: TokenStream, item: TokenStream) -> TokenStream {
    let func = parse_macro_input!(item as ItemFn);
    let settings = parse_macro_input!(attr with Punctuated::<Meta, Token![,]>::parse_terminated);
    let result = StepSettings::parse(&settings).and_then(|s| expand_step(&func, &s));
    result.unwrap_or_else(|e| e.to_compile_error()).into()
}

/// Exports a component's workflows and steps.
///
/// ```ignore
/// keel_sdk::component!(workflows = [process_order], steps = [charge_user]);
/// ```
#[proc_macro]
pub fn component(input: TokenStream) -> TokenStream {
    let lists = parse_macro_input!(input as ComponentLists);
    expand_component(&lists).into()
}

fn require_async(func: &ItemFn, what: &str) -> syn::Result<()> {
    if func.sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            func.sig.fn_token,
            format!("a keel {what} must be an `async fn`"),
        ));
    }
    if matches!(func.sig.output, ReturnType::Default) {
        return Err(syn::Error::new_spanned(
            &func.sig,
            format!("a keel {what} must return a `Result`"),
        ));
    }
    Ok(())
}

/// The `(pattern, type)` of each argument; `self` is refused.
fn typed_args(func: &ItemFn) -> syn::Result<Vec<(Ident, Type)>> {
    func.sig
        .inputs
        .iter()
        .enumerate()
        .map(|(i, arg)| match arg {
            FnArg::Typed(pat) => {
                let ident = match &*pat.pat {
                    Pat::Ident(p) => p.ident.clone(),
                    _ => format_ident!("__arg{i}"),
                };
                Ok((ident, (*pat.ty).clone()))
            }
            FnArg::Receiver(r) => Err(syn::Error::new_spanned(r, "keel functions take no self")),
        })
        .collect()
}

fn expand_workflow(func: &ItemFn, settings: &WorkflowSettings) -> syn::Result<TokenStream2> {
    require_async(func, "workflow")?;
    let args = typed_args(func)?;
    if args.len() > 1 {
        return Err(syn::Error::new_spanned(
            &func.sig.inputs,
            "a workflow takes at most one argument: its input",
        ));
    }
    let name = &func.sig.ident;
    let name_str = name.to_string();
    let def = format_ident!("__keel_workflow_{}", name);
    let vis = &func.vis;
    let call = match args.first() {
        Some((_, ty)) => quote! { |input: #ty| #name(input) },
        None => quote! { |_: ::keel_sdk::__private::serde_json::Value| #name() },
    };
    let idempotency = match &settings.idempotency {
        Some((key, ttl)) => quote! { Some((#key, #ttl)) },
        None => quote! { None },
    };
    let on_events = &settings.on_events;
    let schedule = match &settings.schedule {
        Some(s) => s.tokens(),
        None => quote! { None },
    };
    let concurrency = match &settings.concurrency {
        Some((key, limit, on_limit)) => quote! {
            Some(::keel_sdk::__private::ConcurrencyDef { key: #key, limit: #limit, on_limit: #on_limit })
        },
        None => quote! { None },
    };
    let timeout_ms = match settings.timeout_ms {
        Some(ms) => quote! { Some(#ms) },
        None => quote! { None },
    };
    let durability = match &settings.durability {
        Some(d) => quote! { Some(#d) },
        None => quote! { None },
    };
    let description = match doc_text(&func.attrs) {
        Some(text) => quote! { Some(#text) },
        None => quote! { None },
    };
    let input_ty = match args.first() {
        Some((_, ty)) => quote! { #ty },
        None => quote! { () },
    };
    let output_ty = match &func.sig.output {
        syn::ReturnType::Type(_, ty) => {
            quote! { <#ty as ::keel_sdk::__private::WorkflowOutput>::Ok }
        }
        syn::ReturnType::Default => quote! { () },
    };
    Ok(quote! {
        #func

        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        #vis const #def: ::keel_sdk::__private::WorkflowDef = ::keel_sdk::__private::WorkflowDef {
            name: #name_str,
            idempotency: #idempotency,
            on_events: &[#(#on_events),*],
            schedule: #schedule,
            concurrency: #concurrency,
            timeout_ms: #timeout_ms,
            durability: #durability,
            description: #description,
            run: |input: &str| ::keel_sdk::__private::run_workflow(input, #call),
            schemas: || {
                #[allow(unused_imports)]
                use ::keel_sdk::__private::{HasSchema as _, NoSchema as _};
                (
                    (&&::keel_sdk::__private::Schema::<#input_ty>::new()).json_schema(),
                    (&&::keel_sdk::__private::Schema::<#output_ty>::new()).json_schema(),
                )
            },
        };
    })
}

/// The text of an item's doc comment (`///` lines or `#[doc = "..."]`),
/// its lines joined, or `None` without one.
fn doc_text(attrs: &[syn::Attribute]) -> Option<String> {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(kv) => match &kv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .map(|line| {
            line.strip_prefix(' ')
                .unwrap_or(&line)
                .trim_end()
                .to_string()
        })
        .collect();
    let text = lines.join("\n").trim().to_string();
    (!text.is_empty()).then_some(text)
}

struct StepSettings {
    max_retries: u32,
    initial_backoff_ms: u64,
    backoff_factor: f64,
    max_backoff_ms: u64,
    /// `(key, limit, per in ms)`.
    rate_limit: Option<(String, u32, u64)>,
    /// `(key, limit)`.
    concurrency: Option<(String, u32)>,
    /// `retry_budget = "10m"`: the most time from the first attempt's
    /// start to the last attempt's, in ms.
    retry_budget_ms: Option<u64>,
}

/// `concurrency(key = "CEL", limit = N)` of a step.
fn parse_step_concurrency(list: &syn::MetaList) -> syn::Result<(String, u32)> {
    let inner = list.parse_args_with(Punctuated::<MetaNameValue, Token![,]>::parse_terminated)?;
    let (mut key, mut limit) = (None, None);
    for kv in &inner {
        let Expr::Lit(ExprLit { lit, .. }) = &kv.value else {
            return Err(syn::Error::new_spanned(&kv.value, "expected a literal"));
        };
        match (kv.path.get_ident().map(Ident::to_string).as_deref(), lit) {
            (Some("key"), Lit::Str(s)) => key = Some(s.value()),
            (Some("limit"), Lit::Int(_)) => limit = Some(int_lit(lit)?),
            _ => {
                return Err(syn::Error::new_spanned(
                    kv,
                    "expected `key = \"CEL\"` or `limit = N`",
                ));
            }
        }
    }
    match (key, limit) {
        (Some(key), Some(limit)) if limit > 0 => Ok((key, limit)),
        _ => Err(syn::Error::new_spanned(
            list,
            "a step's concurrency needs `key` and `limit` (at least 1)",
        )),
    }
}

/// `rate_limit(key = "CEL", limit = N, per = "1m")` of a step.
fn parse_rate_limit(list: &syn::MetaList) -> syn::Result<(String, u32, u64)> {
    let inner = list.parse_args_with(Punctuated::<MetaNameValue, Token![,]>::parse_terminated)?;
    let (mut key, mut limit, mut per) = (None, None, None);
    for kv in &inner {
        let Expr::Lit(ExprLit { lit, .. }) = &kv.value else {
            return Err(syn::Error::new_spanned(&kv.value, "expected a literal"));
        };
        match (kv.path.get_ident().map(Ident::to_string).as_deref(), lit) {
            (Some("key"), Lit::Str(s)) => key = Some(s.value()),
            (Some("limit"), Lit::Int(_)) => limit = Some(int_lit(lit)?),
            (Some("per"), _) => per = Some(duration_lit(lit)?),
            _ => {
                return Err(syn::Error::new_spanned(
                    kv,
                    "expected `key = \"CEL\"`, `limit = N` or `per = \"1m\"`",
                ));
            }
        }
    }
    match (key, limit, per) {
        (Some(key), Some(limit), Some(per)) if limit > 0 && per > 0 => Ok((key, limit, per)),
        _ => Err(syn::Error::new_spanned(
            list,
            "rate_limit needs `key`, `limit` (at least 1) and `per` (a duration)",
        )),
    }
}

impl StepSettings {
    fn parse(settings: &Punctuated<Meta, Token![,]>) -> syn::Result<Self> {
        let mut out = StepSettings {
            max_retries: 3,
            initial_backoff_ms: 1_000,
            backoff_factor: 2.0,
            max_backoff_ms: 60_000,
            rate_limit: None,
            concurrency: None,
            retry_budget_ms: None,
        };
        for setting in settings {
            let setting = match setting {
                Meta::List(list) if list.path.is_ident("rate_limit") => {
                    out.rate_limit = Some(parse_rate_limit(list)?);
                    continue;
                }
                Meta::List(list) if list.path.is_ident("concurrency") => {
                    out.concurrency = Some(parse_step_concurrency(list)?);
                    continue;
                }
                Meta::NameValue(kv) => kv,
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "unknown step setting; expected one of max_retries, initial_backoff, \
                         backoff_factor, max_backoff, retry_budget, rate_limit(...), concurrency(...)",
                    ));
                }
            };
            let key = setting
                .path
                .get_ident()
                .map(Ident::to_string)
                .unwrap_or_default();
            let lit = match &setting.value {
                Expr::Lit(ExprLit { lit, .. }) => lit,
                other => return Err(syn::Error::new_spanned(other, "expected a literal")),
            };
            match key.as_str() {
                "max_retries" => out.max_retries = int_lit(lit)?,
                "initial_backoff" => out.initial_backoff_ms = duration_lit(lit)?,
                "max_backoff" => out.max_backoff_ms = duration_lit(lit)?,
                "backoff_factor" => out.backoff_factor = float_lit(lit)?,
                "retry_budget" => out.retry_budget_ms = Some(duration_lit(lit)?),
                _ => {
                    return Err(syn::Error::new_spanned(
                        &setting.path,
                        "unknown step setting; expected one of max_retries, \
                         initial_backoff, backoff_factor, max_backoff, retry_budget, rate_limit(...), concurrency(...)",
                    ));
                }
            }
        }
        Ok(out)
    }
}

fn int_lit(lit: &Lit) -> syn::Result<u32> {
    match lit {
        Lit::Int(i) => i.base10_parse(),
        _ => Err(syn::Error::new_spanned(lit, "expected an integer")),
    }
}

fn float_lit(lit: &Lit) -> syn::Result<f64> {
    match lit {
        Lit::Float(f) => f.base10_parse(),
        Lit::Int(i) => i.base10_parse(),
        _ => Err(syn::Error::new_spanned(lit, "expected a number")),
    }
}

/// A duration as `"250ms"`, `"2s"`, `"1m"` or an integer of milliseconds.
fn duration_lit(lit: &Lit) -> syn::Result<u64> {
    match lit {
        Lit::Int(i) => i.base10_parse(),
        Lit::Str(s) => humantime::parse_duration(&s.value())
            .map(|d| d.as_millis() as u64)
            .map_err(|e| syn::Error::new_spanned(lit, format!("invalid duration: {e}"))),
        _ => Err(syn::Error::new_spanned(
            lit,
            "expected a duration like \"2s\"",
        )),
    }
}

fn expand_step(func: &ItemFn, s: &StepSettings) -> syn::Result<TokenStream2> {
    require_async(func, "step")?;
    let args = typed_args(func)?;
    let name = &func.sig.ident;
    let name_str = name.to_string();
    let vis = &func.vis;
    let body_name = format_ident!("__keel_step_body_{}", name);
    let def = format_ident!("__keel_step_{}", name);
    let output = match &func.sig.output {
        ReturnType::Type(_, ty) => ty.clone(),
        ReturnType::Default => unreachable!("checked by require_async"),
    };
    let mut body_fn = func.clone();
    body_fn.sig.ident = body_name.clone();
    body_fn.vis = syn::Visibility::Inherited;
    body_fn.attrs.retain(|a| !a.path().is_ident("doc"));

    let idents: Vec<_> = args.iter().map(|(i, _)| i).collect();
    let types: Vec<_> = args.iter().map(|(_, t)| t).collect();
    let (pack, unpack_ty, unpack) = match args.len() {
        1 => {
            let (i, t) = &args[0];
            (
                quote! { &#i },
                quote! { #t },
                quote! { |#i: #t| #body_name(#i) },
            )
        }
        _ => (
            quote! { &( #(&#idents,)* ) },
            quote! { ( #(#types,)* ) },
            quote! { |( #(#idents,)* ): ( #(#types,)* )| #body_name(#(#idents),*) },
        ),
    };
    let attrs = func.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let rate_limit = match &s.rate_limit {
        Some((key, limit, per_ms)) => quote! { Some((#key, #limit, #per_ms)) },
        None => quote! { None },
    };
    let concurrency = match &s.concurrency {
        Some((key, limit)) => quote! { Some((#key, #limit)) },
        None => quote! { None },
    };
    let retry_budget = match s.retry_budget_ms {
        Some(ms) => quote! { Some(#ms) },
        None => quote! { None },
    };
    let (retries, initial, factor, max) = (
        s.max_retries,
        s.initial_backoff_ms,
        s.backoff_factor,
        s.max_backoff_ms,
    );
    Ok(quote! {
        #body_fn

        #(#attrs)*
        #vis fn #name(#(#idents: #types),*)
            -> ::keel_sdk::StepFuture<<#output as ::keel_sdk::__private::StepOutput>::Ok>
        {
            ::keel_sdk::__private::call_step(#name_str, #pack)
        }

        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        #vis const #def: ::keel_sdk::__private::StepDef = ::keel_sdk::__private::StepDef {
            name: #name_str,
            retry: ::keel_sdk::RetryPolicy {
                max_retries: #retries,
                initial_backoff_ms: #initial,
                backoff_factor: #factor,
                max_backoff_ms: #max,
            },
            rate_limit: #rate_limit,
            concurrency: #concurrency,
            retry_budget_ms: #retry_budget,
            run: |input: &str| ::keel_sdk::__private::run_step::<#unpack_ty, _, _, _>(input, #unpack),
        };
    })
}

struct ComponentLists {
    workflows: Vec<Path>,
    steps: Vec<Path>,
}

impl Parse for ComponentLists {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut lists = ComponentLists {
            workflows: Vec::new(),
            steps: Vec::new(),
        };
        while !input.is_empty() {
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            let content;
            syn::bracketed!(content in input);
            let paths = Punctuated::<Path, Token![,]>::parse_terminated(&content)?;
            match key.to_string().as_str() {
                "workflows" => lists.workflows.extend(paths),
                "steps" => lists.steps.extend(paths),
                _ => {
                    return Err(syn::Error::new_spanned(
                        key,
                        "expected `workflows` or `steps`",
                    ));
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(lists)
    }
}

fn prefixed(path: &Path, prefix: &str) -> Path {
    let mut path = path.clone();
    if let Some(last) = path.segments.last_mut() {
        last.ident = format_ident!("{}{}", prefix, last.ident);
    }
    path
}

fn expand_component(lists: &ComponentLists) -> TokenStream2 {
    let workflows = lists
        .workflows
        .iter()
        .map(|p| prefixed(p, "__keel_workflow_"));
    let steps = lists.steps.iter().map(|p| prefixed(p, "__keel_step_"));
    quote! {
        #[doc(hidden)]
        struct __KeelComponent;

        impl ::keel_sdk::__private::Registry for __KeelComponent {
            const WORKFLOWS: &'static [::keel_sdk::__private::WorkflowDef] = &[#(#workflows),*];
            const STEPS: &'static [::keel_sdk::__private::StepDef] = &[#(#steps),*];
        }

        ::keel_sdk::__private::__export_component!(
            __KeelComponent with_types_in ::keel_sdk::__private::bindings
        );
    }
}
